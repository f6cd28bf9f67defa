-- Which rank finished each step last (relation `rank_steps`: tp_rank_steps.sql)? One row per run and step:
--   gpu_straggler   the rank whose GPU finished the step's work last (the end of its sampling, or of its forward)
--   gpu_extra_ms    how much later than rank 0's GPU: rank 0 commits the step only once its own copy is back,
--                   but the next forward's first collective waits for the straggler's GPU
--   gpu_margin_ms   how much later than the next-to-last rank
--   host_straggler  the rank whose host finished enqueueing the step's forward last (the end of `launch`): no
--                   collective of the step completes before every rank has queued its kernels
--   host_extra_ms, host_margin_ms  the same for the host
-- Ties go to the lower rank; a step that some rank did not record compares the ranks that did (`ranks`).
WITH ends AS (
    SELECT run_id, step, rank,
           greatest(forward_end, sampling_end) AS gpu_end,
           launch_end AS host_end
    FROM rank_steps
),
gpu_order AS (
    SELECT run_id, step, rank, gpu_end,
           row_number() OVER (PARTITION BY run_id, step ORDER BY gpu_end DESC, rank) AS place
    FROM ends
    WHERE gpu_end IS NOT NULL
),
host_order AS (
    SELECT run_id, step, rank, host_end,
           row_number() OVER (PARTITION BY run_id, step ORDER BY host_end DESC, rank) AS place
    FROM ends
    WHERE host_end IS NOT NULL
),
gpu AS (
    SELECT run_id, step, count(*) AS ranks,
           any_value(rank) FILTER (place = 1) AS gpu_straggler,
           (max(gpu_end) - any_value(gpu_end) FILTER (rank = 0)) / 1e6 AS gpu_extra_ms,
           (max(gpu_end) - any_value(gpu_end) FILTER (place = 2)) / 1e6 AS gpu_margin_ms
    FROM gpu_order
    GROUP BY run_id, step
),
host AS (
    SELECT run_id, step,
           any_value(rank) FILTER (place = 1) AS host_straggler,
           (max(host_end) - any_value(host_end) FILTER (rank = 0)) / 1e6 AS host_extra_ms,
           (max(host_end) - any_value(host_end) FILTER (place = 2)) / 1e6 AS host_margin_ms
    FROM host_order
    GROUP BY run_id, step
)
SELECT g.run_id, g.step, g.ranks, g.gpu_straggler, g.gpu_extra_ms, g.gpu_margin_ms,
       h.host_straggler, h.host_extra_ms, h.host_margin_ms
FROM gpu g
LEFT JOIN host h USING (run_id, step)
ORDER BY g.run_id, g.step
