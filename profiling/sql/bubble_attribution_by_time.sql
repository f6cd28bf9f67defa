-- What was the host doing while the GPU sat in the bubble? The idle intervals of relation `bubble_intervals`
-- split, time-weighted, by the host segment open on the engine thread at each instant (relation `segments`,
-- as in bubble_attribution.sql; $outside when none was); adds up to the same total as bubble_attribution.sql.
-- Sweep line over interval and segment edges: between two consecutive edges both "inside an idle interval"
-- and the phase are constant.
WITH edges AS (  -- interval edges change `inside`; segment edges change `phase`
    SELECT start AS ts, 1 AS inside_delta, NULL AS phase, 2 AS tie FROM bubble_intervals
    UNION ALL SELECT "end", -1, NULL, 2 FROM bubble_intervals
    UNION ALL SELECT "end", 0, $outside, 0 FROM segments
    UNION ALL SELECT start, 0, phase, 1 FROM segments
),
ordered AS (
    SELECT *, row_number() OVER (ORDER BY ts, tie, inside_delta) AS seq FROM edges
),
pieces AS (
    SELECT lead(ts) OVER (ORDER BY seq) - ts AS idle_ns,
           sum(inside_delta) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS inside,
           COALESCE(last_value(phase IGNORE NULLS) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING),
                    $outside) AS phase
    FROM ordered
)
SELECT $run_id AS run_id, phase,
       sum(idle_ns) / 1e6 AS bubble_ms,
       sum(idle_ns) / sum(sum(idle_ns)) OVER () AS bubble_share
FROM pieces
WHERE inside > 0 AND idle_ns > 0
GROUP BY phase
ORDER BY bubble_ms DESC, phase
