-- Which runs of another engine's trace are the processes of one engine split over several GPUs? Runs cut from
-- one file (content_hash's first part) that step by another engine's rules, each on its own GPU, every one of
-- them launching collective kernels ($comm_kernels: NCCL's names). bubblelab ranks its own traces at ingest
-- (tp_assign_ranks.sql) and matches their steps rank by rank; for these it can only say what they look like.
WITH foreign_runs AS (
    SELECT r.run_id, split_part(r.content_hash, '|', 1) AS file_hash, s.device, s.pid
    FROM runs r
    JOIN step_rules s ON s.run_id = r.run_id
    WHERE list_contains($run_ids, r.run_id) AND s.rule <> $ours AND r.rank IS NULL
),
collectives AS (
    SELECT run_id, count(*) AS n
    FROM gpu_ops
    WHERE run_id IN (SELECT run_id FROM foreign_runs) AND op = 'kernel'
      AND regexp_matches(name, $comm_kernels)
    GROUP BY run_id
)
SELECT list(f.run_id ORDER BY f.device, f.pid) AS run_ids,
       count(DISTINCT f.device) AS gpus,
       min(COALESCE(c.n, 0)) AS fewest_collectives
FROM foreign_runs f
LEFT JOIN collectives c ON c.run_id = f.run_id
GROUP BY f.file_hash
HAVING count(*) > 1 AND count(DISTINCT f.device) = count(*) AND min(COALESCE(c.n, 0)) > 0
ORDER BY min(f.run_id)
