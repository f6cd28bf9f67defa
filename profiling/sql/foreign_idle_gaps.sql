-- Every GPU idle gap inside the periods of the given steps of a foreign run (relation `per_step`): the space
-- between two busy islands (gpu_busy.sql, all streams), with the step whose period holds it, within =
-- 'kernel gap' when it is shorter than $gap_ns (counted in kernel_gap_ms) and NULL when it is bubble, what
-- the engine thread was doing when the GPU went idle (host_activity.sql: began_in, and the CUDA call, OS call
-- and NVTX range open then), and launch_lag_us: when the host issued the op that ended the gap, relative to
-- the gap's start (positive: the host had not yet launched the next work when the GPU ran dry).
WITH gaps AS (
    SELECT "end" AS start, lead(start) OVER (ORDER BY start) AS "end"
    FROM gpu_busy WHERE run_id = $run_id
),
periods AS (
    SELECT step, gpu_start_ns AS start, gpu_start_ns + round(period_ms * 1e6)::BIGINT AS "end"
    FROM per_step WHERE run_id = $run_id AND period_ms > 0
),
activity AS (
    SELECT start, "end", cuda, os, nvtx, label FROM host_activity WHERE run_id = $run_id
),
first_launch AS (  -- the op(s) starting at each instant: when was the earliest of them launched?
    SELECT start, min(launched_at) AS launched_at FROM gpu_ops WHERE run_id = $run_id GROUP BY start
),
gaps_in_steps AS (
    SELECT p.step, g.start, g."end"
    FROM gaps g ASOF JOIN periods p ON g.start >= p.start
    WHERE g."end" <= p."end"
)
SELECT g.step, g.start AS start_ns, g."end" AS end_ns, (g."end" - g.start) / 1e3 AS idle_us,
       CASE WHEN g."end" - g.start < $gap_ns THEN 'kernel gap' END AS within,
       CASE WHEN g.start < a."end" THEN a.label ELSE 'untraced host code' END AS began_in,
       (l.launched_at - g.start) / 1e3 AS launch_lag_us,
       CASE WHEN g.start < a."end" THEN a.cuda END AS cuda_call,
       CASE WHEN g.start < a."end" THEN a.os END AS os_call,
       CASE WHEN g.start < a."end" THEN a.nvtx END AS nvtx_range
FROM gaps_in_steps g
LEFT JOIN first_launch l ON l.start = g."end"
ASOF LEFT JOIN activity a ON g.start >= a.start
ORDER BY g.start
