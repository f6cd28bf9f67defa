-- Every GPU idle gap inside a foreign run's step periods (derived at ingest, from its per-step table): the
-- space between two busy islands (gpu_busy.sql, all streams), with the step whose period holds it, and when
-- the host issued the op that ended it (launched_at; its lag behind the gap's start says whether the host
-- had launched the next work before the GPU ran dry). Gaps never straddle a period edge: each edge is an
-- op start. profiling.foreign.gaps reads them per set of steps, as kernel gaps or bubble.
INSERT INTO idle_gaps
WITH gaps AS (
    SELECT "end" AS start, lead(start) OVER (ORDER BY start) AS "end"
    FROM gpu_busy WHERE run_id = $run_id
),
periods AS (
    SELECT step, gpu_start_ns AS start, gpu_start_ns + round(period_ms * 1e6)::BIGINT AS "end"
    FROM steps WHERE run_id = $run_id AND period_ms > 0
),
first_launch AS (  -- the op(s) starting at each instant: when was the earliest of them launched?
    SELECT start, min(launched_at) AS launched_at FROM gpu_ops WHERE run_id = $run_id GROUP BY start
),
gaps_in_steps AS (
    SELECT p.step, g.start, g."end"
    FROM gaps g ASOF JOIN periods p ON g.start >= p.start
    WHERE g."end" <= p."end"
)
SELECT $run_id, g.step, g.start, g."end", l.launched_at
FROM gaps_in_steps g
LEFT JOIN first_launch l ON l.start = g."end"
