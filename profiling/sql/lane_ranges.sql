-- Host ranges and GPU work of one run's steps $first..$last, for the lane chart (costmodel.figures.lane_chart).
-- Host: every range of our domain as recorded. GPU: the ops of each step and part (forward or prefill,
-- sampling) merged into islands wherever the GPU idles less than $min_gap_ns between them. A decode forward
-- is ~2,000 kernels with sub-microsecond gaps, far below a pixel of a chart tens of milliseconds wide; an
-- eager prefill whose kernels the host launches one by one keeps its wider, host-made gaps.
WITH gpu AS (
    SELECT step, start, "end",
           CASE WHEN phase IN ('forward', 'prefill') THEN phase
                WHEN phase IN ('sampling', 'mask', 'copy_d2h') THEN 'sampling' END AS part
    FROM gpu_ops
    WHERE run_id = $run_id AND step BETWEEN $first AND $last
),
reach AS (  -- the furthest end of the earlier ops of the same step and part
    SELECT *, max("end") OVER (PARTITION BY step, part ORDER BY start, "end"
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reached
    FROM gpu WHERE part IS NOT NULL
),
islands AS (  -- a new island starts where an op begins more than $min_gap_ns past everything before it
    SELECT *, sum(CASE WHEN reached IS NULL OR start > reached + $min_gap_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY step, part ORDER BY start, "end") AS island
    FROM reach
)
SELECT 'host' AS lane, name AS phase, step, start AS start_ns, "end" AS end_ns
FROM host_ranges
WHERE run_id = $run_id AND step BETWEEN $first AND $last
UNION ALL
SELECT 'gpu' AS lane, part AS phase, step, min(start) AS start_ns, max("end") AS end_ns
FROM islands
GROUP BY step, part, island
ORDER BY lane, start_ns
