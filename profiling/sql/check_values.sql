-- Can a run's rows be believed? Run at ingest, after the rows are copied and before anything is derived
-- from them. Counted into trace_checks (rows, problem, count, of how many, action), then:
--   dropped   an interval whose end is before its start, a GPU op of zero length, anything outside the
--             capture's time range [lo, hi] (profiling/trace_check.py: capture_range; a timestamp shifted
--             by years, a clock jump), a GPU op that starts before the CUDA call that launched it (the
--             GPU's and the host's clocks disagree: a launch takes microseconds, never less than none).
--             The ops of a dropped call stay (the GPU ran them) but lose their link to it.
--   counted   GPU ops that overlap the op before them on their own stream by more than overlap_ns: a
--             stream runs its ops in order, so beyond the few microseconds a programmatic dependent
--             launch may overlap (XLA's kernels on the H200: up to 1.5 us) the clocks are not to be trusted.
-- Nothing else changes: a believable trace loses no row.
CREATE OR REPLACE TEMP MACRO value_problem(s, e, lo, hi) AS
    CASE WHEN e < s THEN 'end before start' WHEN s < lo OR e > hi THEN 'outside the capture' END;

INSERT INTO trace_checks
WITH host_rows AS (
    SELECT 'CUDA API calls' AS what, value_problem(start, "end", $lo, $hi) AS problem
    FROM api_calls WHERE run_id = $run_id
    UNION ALL
    SELECT 'OS runtime calls', value_problem(start, "end", $lo, $hi) FROM os_calls WHERE run_id = $run_id
    UNION ALL
    SELECT 'NVTX ranges', value_problem(start, "end", $lo, $hi) FROM host_ranges WHERE run_id = $run_id
    UNION ALL
    SELECT 'sync records', value_problem(start, "end", $lo, $hi) FROM syncs WHERE run_id = $run_id
),
counted AS (  -- a few groups: a window over every row would sort them all
    SELECT what, problem, count(*) AS found FROM host_rows GROUP BY what, problem
),
totalled AS (
    SELECT *, sum(found) OVER (PARTITION BY what) AS total FROM counted
)
SELECT $run_id, what, problem, found, total, 'dropped'
FROM totalled WHERE problem IS NOT NULL;

UPDATE gpu_ops SET launched_at = NULL, tid = NULL, phase = NULL, step = NULL
FROM (SELECT pid, correlation_id FROM api_calls
      WHERE run_id = $run_id AND value_problem(start, "end", $lo, $hi) IS NOT NULL) bad
WHERE gpu_ops.run_id = $run_id AND gpu_ops.pid = bad.pid AND gpu_ops.correlation_id = bad.correlation_id;

DELETE FROM api_calls WHERE run_id = $run_id AND value_problem(start, "end", $lo, $hi) IS NOT NULL;
DELETE FROM os_calls WHERE run_id = $run_id AND value_problem(start, "end", $lo, $hi) IS NOT NULL;
DELETE FROM host_ranges WHERE run_id = $run_id AND value_problem(start, "end", $lo, $hi) IS NOT NULL;
DELETE FROM syncs WHERE run_id = $run_id AND value_problem(start, "end", $lo, $hi) IS NOT NULL;

CREATE OR REPLACE TEMP MACRO op_problem(s, e, launched, lo, hi) AS
    COALESCE(value_problem(s, e, lo, hi),
             CASE WHEN e = s THEN 'zero length' WHEN s < launched THEN 'start before the call that launched them' END);

INSERT INTO trace_checks
WITH counted AS (
    SELECT op_problem(start, "end", launched_at, $lo, $hi) AS problem, count(*) AS found
    FROM gpu_ops WHERE run_id = $run_id GROUP BY problem
),
totalled AS (
    SELECT *, sum(found) OVER () AS total FROM counted
)
SELECT $run_id, 'GPU ops', problem, found, total, 'dropped'
FROM totalled WHERE problem IS NOT NULL;

DELETE FROM gpu_ops WHERE run_id = $run_id AND op_problem(start, "end", launched_at, $lo, $hi) IS NOT NULL;

INSERT INTO trace_checks
WITH ordered AS (
    SELECT start, lag("end") OVER (PARTITION BY pid, stream_id ORDER BY start, "end") AS before_end
    FROM gpu_ops WHERE run_id = $run_id
)
SELECT $run_id, 'GPU ops', 'overlap the op before them on their stream', count(*),
       (SELECT count(*) FROM gpu_ops WHERE run_id = $run_id), 'counted'
FROM ordered WHERE before_end - start > $overlap_ns
HAVING count(*) > 0;
