-- Every GPU idle gap inside the periods of the given steps (relation `per_step`): the space between two
-- busy islands (gpu_busy.sql, all streams), with the step whose period holds it, `within` = 'forward' or
-- 'sampling' when it lies inside that span of the step (a launch gap between kernels, counted in
-- kernel_gap_ms) and NULL when it lies between the spans (part of the bubble), the innermost host phase open on
-- the engine thread when the GPU went idle, and launch_lag_us: when the host issued the op that ended the gap,
-- relative to the gap's start. Positive: the host had not even launched the next work when the GPU ran dry
-- (a CPU-bound bubble). Negative: the work was queued and waited on something else (an event, another
-- stream). NULL for timelines, which record no launches. Gaps never straddle a period edge: each edge is
-- an op start. $bubble_only: only the gaps between the spans (a summary of the bubble need not read a
-- million launch gaps).
WITH gaps AS (
    SELECT "end" AS start, lead(start) OVER (ORDER BY start) AS "end"
    FROM gpu_busy WHERE run_id = $run_id
),
periods AS (
    SELECT step, gpu_start_ns AS start, gpu_start_ns + round(period_ms * 1e6)::BIGINT AS "end"
    FROM per_step WHERE run_id = $run_id AND period_ms IS NOT NULL
),
spans AS (  -- one row per step: both spans side by side
    SELECT step,
           min(start) FILTER (part = 'forward') AS f0, max("end") FILTER (part = 'forward') AS f1,
           min(start) FILTER (part = 'sampling') AS s0, max("end") FILTER (part = 'sampling') AS s1
    FROM step_spans WHERE run_id = $run_id
    GROUP BY step
),
engine_thread AS (  -- the thread that opened the most ranges
    SELECT tid FROM host_ranges WHERE run_id = $run_id GROUP BY tid ORDER BY count(*) DESC, tid LIMIT 1
),
segments AS (
    SELECT start, "end", phase FROM host_segments WHERE run_id = $run_id AND tid = (FROM engine_thread)
),
first_launch AS (  -- the op(s) starting at each instant: when was the earliest of them launched?
    SELECT start, min(launched_at) AS launched_at FROM gpu_ops WHERE run_id = $run_id GROUP BY start
),
gaps_in_steps AS (
    SELECT p.step, g.start, g."end"
    FROM gaps g ASOF JOIN periods p ON g.start >= p.start
    WHERE g."end" <= p."end"
),
placed AS (
    SELECT g.*,
           CASE WHEN g.start >= x.f0 AND g."end" <= x.f1 THEN 'forward'
                WHEN g.start >= x.s0 AND g."end" <= x.s1 THEN 'sampling' END AS within
    FROM gaps_in_steps g
    LEFT JOIN spans x USING (step)
)
SELECT g.step, g.start AS start_ns, g."end" AS end_ns, (g."end" - g.start) / 1e3 AS idle_us, g.within,
       CASE WHEN g.start < s."end" THEN s.phase ELSE 'outside any phase' END AS began_in,
       (l.launched_at - g.start) / 1e3 AS launch_lag_us
FROM (FROM placed WHERE NOT $bubble_only OR within IS NULL) g
LEFT JOIN first_launch l ON l.start = g."end"
ASOF LEFT JOIN segments s ON g.start >= s.start
ORDER BY g.start
