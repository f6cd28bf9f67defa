-- Where did the bubble go? Every GPU idle interval of the bubble (relation `bubble_intervals`: for a
-- bubblelab run the compute stream idle between the steps' spans, for a foreign run the idle gaps longer
-- than the kernel-gap threshold) split by the host segment open on the engine thread (relation `segments`:
-- start, end, phase; engine_segments.sql or gap_activity.sql; $outside when none was), two ways:
--   time_ms:  time-weighted, what the host was doing during each instant of the idle time: the part of the
--             loop you would have to make faster to shrink the bubble (the headline);
--   began_ms: each interval whole to the phase open when it began (at depth 1 mostly `wait`: the host
--             learns the GPU is done only there).
-- Both add up to the steps' summed bubble_ms; profiling.analysis.attribution adds the top-level rollup.
WITH began AS (  -- the phase open when each interval began
    SELECT i."end" - i.start AS idle_ns,
           CASE WHEN i.start < s."end" THEN s.phase ELSE $outside END AS phase
    FROM bubble_intervals i
    ASOF LEFT JOIN segments s ON i.start >= s.start
),
-- Sweep line over interval and segment edges: between two consecutive edges both "inside an idle
-- interval" and the phase are constant. Interval edges change `inside`; segment edges change `phase`.
edges AS (
    SELECT start AS ts, 1 AS inside_delta, NULL AS phase, 2 AS tie FROM bubble_intervals
    UNION ALL SELECT "end", -1, NULL, 2 FROM bubble_intervals
    UNION ALL SELECT "end", 0, $outside, 0 FROM segments
    UNION ALL SELECT start, 0, phase, 1 FROM segments
),
ordered AS (
    SELECT *, row_number() OVER (ORDER BY ts, tie, inside_delta) AS seq FROM edges
),
pieces AS (  -- what the host was doing during each piece of idle time
    SELECT lead(ts) OVER (ORDER BY seq) - ts AS idle_ns,
           sum(inside_delta) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS inside,
           COALESCE(last_value(phase IGNORE NULLS) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING),
                    $outside) AS phase
    FROM ordered
),
by_time AS (
    SELECT phase, sum(idle_ns) AS ns FROM pieces WHERE inside > 0 AND idle_ns > 0 GROUP BY phase
),
by_began AS (
    SELECT phase, sum(idle_ns) AS ns FROM began GROUP BY phase
),
both_splits AS (
    SELECT phase, COALESCE(t.ns, 0) AS time_ns, COALESCE(b.ns, 0) AS began_ns
    FROM by_time t FULL JOIN by_began b USING (phase)
    WHERE COALESCE(t.ns, 0) + COALESCE(b.ns, 0) > 0
)
SELECT $run_id AS run_id, phase,
       time_ns / 1e6 AS time_ms,
       began_ns / 1e6 AS began_ms,
       time_ns / sum(time_ns) OVER () AS time_share,
       began_ns / sum(began_ns) OVER () AS began_share
FROM both_splits
ORDER BY time_ms DESC, began_ms DESC, phase
