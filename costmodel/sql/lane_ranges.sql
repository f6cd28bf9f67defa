-- Host ranges and GPU work of one run's steps $first..$last, for the lane chart (costmodel.figures.lane_chart).
-- Host: every range of our domain as recorded. GPU: per step, the span (first start, last end) of the ops of
-- each part, forward (or prefill) and sampling, like step_gpu_ms: a decode forward is ~2,000 kernels with
-- sub-microsecond gaps, far below a pixel at the chart's tens of milliseconds, so spans draw the same picture.
WITH gpu AS (
    SELECT step, start, "end",
           CASE WHEN phase IN ('forward', 'prefill') THEN phase
                WHEN phase IN ('sampling', 'mask', 'copy_d2h') THEN 'sampling' END AS part
    FROM gpu_ops
    WHERE run_id = $run_id AND step BETWEEN $first AND $last
)
SELECT 'host' AS lane, name AS phase, step, start AS start_ns, "end" AS end_ns
FROM host_ranges
WHERE run_id = $run_id AND step BETWEEN $first AND $last
UNION ALL
SELECT 'gpu' AS lane, part AS phase, step, min(start) AS start_ns, max("end") AS end_ns
FROM gpu WHERE part IS NOT NULL
GROUP BY step, part
ORDER BY lane, start_ns
