-- Each rank of a tensor-parallel run over chosen steps (relation `rank_steps`: tp_rank_steps.sql cut to the
-- steps to summarise, normally rank 0's steady state; relation `stragglers`: tp_straggler.sql over the same
-- steps): one row per run and rank with the median of its per-step times, how far behind rank 0 it started each
-- step, and how often it was the straggler.
--   forward_lag_ms  its GPU's forward start minus rank 0's (a worker's: the hand-off's lag, at depth 1)
--   launch_lag_ms   its host's launch start minus rank 0's (a worker's: when rank 0's message reached it)
WITH leader AS (  -- rank 0's start of each step
    SELECT run_id, step, forward_start AS forward0, launch_start AS launch0
    FROM rank_steps
    WHERE rank = 0
),
lagged AS (
    SELECT r.*,
           (r.forward_start - l.forward0) / 1e6 AS forward_lag_ms,
           (r.launch_start - l.launch0) / 1e6 AS launch_lag_ms
    FROM rank_steps r
    LEFT JOIN leader l ON l.run_id = r.run_id AND l.step = r.step
),
last AS (
    SELECT g.run_id, g.rank, g.step,
           (s.gpu_straggler = g.rank)::INTEGER AS gpu_last,
           (s.host_straggler = g.rank)::INTEGER AS host_last
    FROM lagged g
    LEFT JOIN stragglers s ON s.run_id = g.run_id AND s.step = g.step
)
SELECT g.run_id, g.rank, any_value(g.rank_run_id) AS rank_run_id, count(*) AS steps,
       median(g.forward_ms) AS forward_ms,
       median(g.sampling_ms) AS sampling_ms,
       median(g.bubble_ms) AS bubble_ms,
       median(g.period_ms) AS period_ms,
       median(g.busy_ms) AS busy_ms,
       median(g.compute_ms) AS compute_ms,
       median(g.comm_ms) AS comm_ms,
       median(g.comm_exposed_ms) AS comm_exposed_ms,
       median(g.launch_ms) AS launch_ms,
       median(g.finalize_ms) AS finalize_ms,
       median(g.handoff_ms) AS handoff_ms,
       median(g.recv_ms) AS recv_ms,
       median(g.forward_lag_ms) AS forward_lag_ms,
       median(g.launch_lag_ms) AS launch_lag_ms,
       avg(l.gpu_last) AS gpu_straggler_share,
       avg(l.host_last) AS host_straggler_share
FROM lagged g
JOIN last l ON l.run_id = g.run_id AND l.rank = g.rank AND l.step = g.step
GROUP BY g.run_id, g.rank
ORDER BY g.run_id, g.rank
