-- How much of the run's GPU time would candidate steps hold? The share of the ops' summed time whose
-- launching call lies in [$first, $last): every rule's step windows follow each other without gaps, so that
-- is the time inside them. The step finder (profiling/steps.py) prefers the rule whose steps hold more.
SELECT COALESCE(sum("end" - start) FILTER (launched_at >= $first AND launched_at < $last)
                / NULLIF(sum("end" - start), 0), 0) AS coverage
FROM gpu_ops
WHERE run_id = $run_id
