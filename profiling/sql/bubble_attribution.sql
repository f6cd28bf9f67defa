-- Which host phase was the engine thread in while the GPU sat idle? (relation `idle_gaps`)
--   idle_ms   idle time split by the innermost phase open during it (time-weighted)
--   began_ms  idle time of the gaps that began in that phase (the whole gap goes to one phase)
-- Both columns add up to the total idle time of the gaps given, i.e. the sum of the steps' bubble_ms.
-- Sweep line over gap edges and segment edges: between consecutive edges both states are constant.
WITH engine_thread AS (
    SELECT tid FROM host_ranges WHERE run_id = $run_id GROUP BY tid ORDER BY count(*) DESC LIMIT 1
),
segments AS (
    SELECT start, "end", phase FROM host_segments WHERE run_id = $run_id AND tid = (FROM engine_thread)
),
edges AS (  -- gap edges change `idle`, segment edges change `phase` ('outside any phase' between segments)
    SELECT start_ns AS ts, 1 AS idle_delta, NULL AS phase, 2 AS tie FROM idle_gaps
    UNION ALL SELECT end_ns, -1, NULL, 2 FROM idle_gaps
    UNION ALL SELECT "end", 0, 'outside any phase', 0 FROM segments
    UNION ALL SELECT start, 0, phase, 1 FROM segments
),
ordered AS (
    SELECT *, row_number() OVER (ORDER BY ts, tie) AS seq FROM edges
),
pieces AS (
    SELECT lead(ts) OVER (ORDER BY seq) - ts AS length_ns,
           sum(idle_delta) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS idle,
           COALESCE(last_value(phase IGNORE NULLS) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING),
                    'outside any phase') AS phase
    FROM ordered
),
during AS (
    SELECT phase, sum(length_ns) / 1e6 AS idle_ms FROM pieces WHERE idle > 0 GROUP BY phase
),
began AS (
    SELECT began_in AS phase, sum(idle_us) / 1e3 AS began_ms, count(*) AS gaps FROM idle_gaps GROUP BY began_in
)
SELECT phase,
       COALESCE(d.idle_ms, 0) AS idle_ms,
       COALESCE(b.began_ms, 0) AS began_ms,
       COALESCE(b.gaps, 0) AS gaps_began,
       COALESCE(d.idle_ms, 0) / sum(COALESCE(d.idle_ms, 0)) OVER () AS idle_share
FROM during d FULL JOIN began b USING (phase)
ORDER BY idle_ms DESC, phase
