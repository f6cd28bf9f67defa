-- How much of the run's GPU time do candidate step windows (relation `windows`: host_start, host_end) hold?
-- The share of the ops' summed time whose launching call lies inside a window; the step finder
-- (profiling/steps.py) prefers the rule whose steps hold more of the GPU's work.
WITH ops AS (
    SELECT launched_at, "end" - start AS ns FROM gpu_ops WHERE run_id = $run_id
),
inside AS (
    SELECT o.ns
    FROM ops o ASOF JOIN windows w ON o.launched_at >= w.host_start
    WHERE o.launched_at < w.host_end
)
SELECT COALESCE((SELECT sum(ns) FROM inside) / NULLIF((SELECT sum(ns) FROM ops), 0), 0) AS coverage
