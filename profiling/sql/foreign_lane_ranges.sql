-- Host waits and GPU work of a foreign run's steps $first..$last, for the lane chart
-- (costmodel.figures.lane_chart): the engine thread's sync points as 'wait' (the one host phase a foreign
-- trace shows without names), and each step's ops merged into islands wherever the GPU idles less than
-- $min_gap_ns, as 'forward' ('prefill' for a prefill-like step).
WITH gpu AS (
    SELECT o.step, o.start, o."end", CASE WHEN s.kind = 'prefill' THEN 'prefill' ELSE 'forward' END AS part
    FROM gpu_ops o JOIN steps s ON s.run_id = o.run_id AND s.step = o.step
    WHERE o.run_id = $run_id AND o.step BETWEEN $first AND $last
),
reach AS (  -- the furthest end of the earlier ops of the same step
    SELECT *, max("end") OVER (PARTITION BY step ORDER BY start, "end"
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reached
    FROM gpu
),
islands AS (  -- a new island starts where an op begins more than $min_gap_ns past everything before it
    SELECT *, sum(CASE WHEN reached IS NULL OR start > reached + $min_gap_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY step ORDER BY start, "end") AS island
    FROM reach
)
SELECT 'host' AS lane, 'wait' AS phase, step, start AS start_ns, "end" AS end_ns
FROM sync_points
WHERE run_id = $run_id AND step BETWEEN $first AND $last
UNION ALL
SELECT 'gpu' AS lane, part AS phase, step, min(start) AS start_ns, max("end") AS end_ns
FROM islands
GROUP BY step, part, island
ORDER BY lane, start_ns
