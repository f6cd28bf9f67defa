-- Which runs are the ranks of one tensor-parallel run? One row per rank: run_id (rank 0's run, which names the
-- whole run), rank, rank_run_id (the run holding that rank's steps). Rank 0's run has rank 0 and
-- tensor_parallel > 1.
--   timeline  run-and-profile stores rank r's in-process timeline as the run `<rank 0's run>-rank<r>`
--             (profiling.ranks.rank_run_id)
--   nsys      one export holds every rank's process: the ranks are the runs cut from the same file
--             (a run's content_hash is the file's sha256, then '|' and its process and GPU;
--             sql/tp_assign_ranks.sql gave each its rank)
WITH leaders AS (
    SELECT run_id, source, split_part(content_hash, '|', 1) AS file_hash
    FROM runs
    WHERE rank = 0 AND tensor_parallel > 1
),
members AS (
    SELECT l.run_id, r.rank, r.run_id AS rank_run_id
    FROM leaders l
    JOIN runs r ON r.source = l.source AND r.rank IS NOT NULL
     AND CASE WHEN l.source = 'nsys' THEN split_part(r.content_hash, '|', 1) = l.file_hash
              ELSE r.run_id = l.run_id OR r.run_id = l.run_id || '-rank' || r.rank::VARCHAR END
)
SELECT run_id, rank, rank_run_id
FROM members
ORDER BY run_id, rank
