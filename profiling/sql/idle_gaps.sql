-- Every GPU idle gap inside the periods of the given steps (relation `per_step`), with the step whose
-- period holds it and the innermost host phase open on the engine thread when the GPU went idle.
-- A gap is the space between the end of everything launched so far and the next op's start (sweep line).
-- Gaps never straddle a period boundary: each boundary is an op start, i.e. busy.
WITH ops AS (
    SELECT start, "end" FROM gpu_ops WHERE run_id = $run_id
),
gaps AS (
    SELECT covered AS start, start AS "end"
    FROM (SELECT start,
                 max("end") OVER (ORDER BY start, "end" ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered
          FROM ops)
    WHERE start > covered
),
periods AS (
    SELECT step, gpu_start_ns AS start, gpu_start_ns + round(period_ms * 1e6)::BIGINT AS "end"
    FROM per_step WHERE run_id = $run_id AND period_ms IS NOT NULL
),
engine_thread AS (  -- the thread that opened the most ranges
    SELECT tid FROM host_ranges WHERE run_id = $run_id GROUP BY tid ORDER BY count(*) DESC LIMIT 1
),
segments AS (
    SELECT start, "end", phase FROM host_segments WHERE run_id = $run_id AND tid = (FROM engine_thread)
),
gaps_in_steps AS (
    SELECT p.step, g.start, g."end"
    FROM gaps g ASOF JOIN periods p ON g.start >= p.start
    WHERE g."end" <= p."end"
)
SELECT g.step, g.start AS start_ns, g."end" AS end_ns, (g."end" - g.start) / 1e3 AS idle_us,
       CASE WHEN g.start < s."end" THEN s.phase ELSE 'outside any phase' END AS began_in
FROM gaps_in_steps g
ASOF LEFT JOIN segments s ON g.start >= s.start
ORDER BY g.start
