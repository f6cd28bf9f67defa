-- When was the compute stream idle inside the given steps' periods (relation `per_step`)? The bubble as
-- intervals: each period minus the step's forward and sampling spans (step_spans.sql), i.e. the idle before,
-- between and after the spans in start order. Per step they add up to its bubble_ms.
WITH periods AS (
    SELECT step, gpu_start_ns AS p0, gpu_start_ns + round(period_ms * 1e6)::BIGINT AS p1
    FROM per_step WHERE run_id = $run_id AND period_ms IS NOT NULL
),
clipped AS (  -- the step's spans, cut to its period
    SELECT p.step, p.p0, greatest(s.start, p.p0) AS start, least(s."end", p.p1) AS "end"
    FROM periods p JOIN step_spans s ON s.run_id = $run_id AND s.step = p.step
    WHERE s."end" > p.p0 AND s.start < p.p1
),
pieces AS (
    -- the idle before each span: from the furthest end of the spans started before it
    SELECT step,
           COALESCE(max("end") OVER (PARTITION BY step ORDER BY start, "end"
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), p0) AS start,
           start AS "end"
    FROM clipped
    UNION ALL
    -- the idle after the last span (the whole period if the step has no span in it)
    SELECT p.step, COALESCE(max(c."end"), p.p0), p.p1
    FROM periods p LEFT JOIN clipped c USING (step)
    GROUP BY p.step, p.p0, p.p1
)
SELECT step, start, "end"
FROM pieces
WHERE "end" > start
ORDER BY start
