-- Which host phase was the engine thread in while the GPU sat idle, within the given steps' periods
-- (relation `per_step`)? Idle time split by the innermost phase open at each instant (time-weighted);
-- the phases add up to the steps' summed bubble_ms ('outside any phase' when no range was open).
-- Sweep line over period and segment edges: between two consecutive edges the phase and "inside a
-- period" are constant, and the idle time of that piece is its length minus the GPU busy time in it,
-- B(end) - B(start), one ASOF lookup each on gpu_busy.
WITH periods AS (
    SELECT gpu_start_ns AS start, gpu_start_ns + round(period_ms * 1e6)::BIGINT AS "end"
    FROM per_step WHERE run_id = $run_id AND period_ms IS NOT NULL
),
engine_thread AS (
    SELECT tid FROM host_ranges WHERE run_id = $run_id GROUP BY tid ORDER BY count(*) DESC, tid LIMIT 1
),
segments AS (
    SELECT start, "end", phase FROM host_segments WHERE run_id = $run_id AND tid = (FROM engine_thread)
),
edges AS (  -- period edges change `inside`; segment edges change `phase`
    SELECT start AS ts, 1 AS inside_delta, NULL AS phase, 2 AS tie FROM periods
    UNION ALL SELECT "end", -1, NULL, 2 FROM periods
    UNION ALL SELECT "end", 0, 'outside any phase', 0 FROM segments
    UNION ALL SELECT start, 0, phase, 1 FROM segments
),
ordered AS (
    SELECT *, row_number() OVER (ORDER BY ts, tie, inside_delta) AS seq FROM edges
),
pieces AS (
    SELECT ts AS start,
           lead(ts) OVER (ORDER BY seq) AS "end",
           sum(inside_delta) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS inside,
           COALESCE(last_value(phase IGNORE NULLS) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING),
                    'outside any phase') AS phase
    FROM ordered
),
busy AS (
    SELECT start, "end", busy_before FROM gpu_busy WHERE run_id = $run_id
),
idle_pieces AS (
    SELECT p.phase,
           (p."end" - p.start)
             - (COALESCE(e.busy_before + least(p."end", e."end") - e.start, 0)
                - COALESCE(s.busy_before + least(p.start, s."end") - s.start, 0)) AS idle_ns
    FROM pieces p
    ASOF LEFT JOIN busy s ON p.start >= s.start
    ASOF LEFT JOIN busy e ON p."end" >= e.start
    WHERE p.inside > 0 AND p."end" > p.start
)
SELECT phase, sum(idle_ns) / 1e6 AS idle_ms, sum(idle_ns) / sum(sum(idle_ns)) OVER () AS idle_share
FROM idle_pieces
GROUP BY phase
HAVING sum(idle_ns) > 0
ORDER BY idle_ms DESC, phase
