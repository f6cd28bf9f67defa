-- Which process of a trace is which tensor-parallel rank ($run_ids: the trace's runs, one per process and GPU)?
-- Rank 0 is the process that plans: only it has `plan` ranges (it schedules and hands each step to the
-- others). Rank r >= 1 runs on the r-th GPU past rank 0's (engine.distributed.worker.rank_device), so the other
-- processes take their ranks in the order of their GPUs. A trace is read as one tensor-parallel run only when
-- exactly one of its processes plans (two planners are two engines); a rank or size the caller gave is kept.
UPDATE runs SET rank = COALESCE(runs.rank, o.rank),
                tensor_parallel = COALESCE(runs.tensor_parallel, o.size)
FROM (
    WITH parts AS (  -- the trace's runs that hold our ranges: their GPU, and whether they plan
        SELECT s.run_id, s.device, s.pid, bool_or(h.name = 'plan') AS plans
        FROM step_rules s
        JOIN host_ranges h ON h.run_id = s.run_id
        WHERE list_contains($run_ids, s.run_id)
        GROUP BY s.run_id, s.device, s.pid
    )
    SELECT run_id,
           row_number() OVER (ORDER BY plans DESC, device, pid) - 1 AS rank,
           count(*) OVER () AS size
    FROM parts
    WHERE (SELECT count(*) FILTER (plans) FROM parts) = 1
) o
WHERE runs.run_id = o.run_id
