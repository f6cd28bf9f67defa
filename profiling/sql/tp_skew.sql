-- How far apart were the ranks in each step (relation `rank_steps`: tp_rank_steps.sql)? Per run and step, the
-- spread (latest rank minus earliest, ms) of when each rank's GPU started and ended the step's forward and
-- ended its sampling, and of when each rank's host started and ended the step's launch and finalize.
-- At depth 1 the forward's start skew is mostly the hand-off: a worker enqueues the step only once rank 0's
-- message has reached it, and rank 0's first collective waits for it there. The collectives line the ranks up,
-- so the forward's end skew stays small whatever its start skew was.
WITH spread AS (
    SELECT run_id, step, count(*) AS ranks,
           max(forward_start) - min(forward_start) AS forward_start_ns,
           max(forward_end) - min(forward_end) AS forward_end_ns,
           max(sampling_end) - min(sampling_end) AS sampling_end_ns,
           max(launch_start) - min(launch_start) AS launch_start_ns,
           max(launch_end) - min(launch_end) AS launch_end_ns,
           max(finalize_start) - min(finalize_start) AS finalize_start_ns,
           max(finalize_end) - min(finalize_end) AS finalize_end_ns
    FROM rank_steps
    GROUP BY run_id, step
)
SELECT run_id, step, ranks,
       forward_start_ns / 1e6 AS forward_start_skew_ms,
       forward_end_ns / 1e6 AS forward_end_skew_ms,
       sampling_end_ns / 1e6 AS sampling_end_skew_ms,
       launch_start_ns / 1e6 AS launch_start_skew_ms,
       launch_end_ns / 1e6 AS launch_end_skew_ms,
       finalize_start_ns / 1e6 AS finalize_start_skew_ms,
       finalize_end_ns / 1e6 AS finalize_end_skew_ms
FROM spread
ORDER BY run_id, step
