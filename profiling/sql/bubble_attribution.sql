-- Where did the bubble go? For every GPU idle interval of the bubble (relation `bubble_intervals`: for a
-- bubblelab run the compute stream idle between the steps' spans, for a foreign run the idle gaps longer
-- than the kernel-gap threshold), the host segment open on the engine thread when it began (relation
-- `segments`: start, end, phase; engine_segments.sql or activity_segments.sql), $outside when none was;
-- totals per phase, adding up to the steps' summed bubble_ms (profiling.analysis.attribution adds the
-- top-level rollup).
-- At depth 1 the GPU mostly goes idle while the host is in `wait` (it learns the GPU is done only there),
-- so bubble_attribution_by_time.sql splits the same idle time by what the host did during it.
WITH began AS (
    SELECT i."end" - i.start AS idle_ns,
           CASE WHEN i.start < s."end" THEN s.phase ELSE $outside END AS phase
    FROM bubble_intervals i
    ASOF LEFT JOIN segments s ON i.start >= s.start
)
SELECT $run_id AS run_id, phase,
       sum(idle_ns) / 1e6 AS bubble_ms,
       sum(idle_ns) / sum(sum(idle_ns)) OVER () AS bubble_share
FROM began
GROUP BY phase
HAVING sum(idle_ns) > 0
ORDER BY bubble_ms DESC, phase
