-- The idle gaps (idle_gaps table, foreign_gaps.sql) of the given steps of a foreign run (relation
-- `per_step`): within = 'kernel gap' when shorter than $gap_ns (counted in kernel_gap_ms), NULL when bubble;
-- launch_lag_us: when the host launched the op that ended the gap, relative to the gap's start (positive:
-- the host had not yet launched the next work when the GPU ran dry). Only gaps of at least $min_ns (0: all;
-- the threshold: the bubble alone, without a million kernel gaps to read).
SELECT g.step, g.start AS start_ns, g."end" AS end_ns, (g."end" - g.start) / 1e3 AS idle_us,
       CASE WHEN g."end" - g.start < $gap_ns THEN 'kernel gap' END AS within,
       (g.launched_at - g.start) / 1e3 AS launch_lag_us
FROM idle_gaps g
SEMI JOIN (SELECT step FROM per_step WHERE run_id = $run_id) s USING (step)
WHERE g.run_id = $run_id AND g."end" - g.start >= $min_ns
ORDER BY g.start
