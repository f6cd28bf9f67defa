-- How long from the host's launch call to the GPU starting the work? One row per launch (a CUDA API call whose
-- correlation id some kernel carries: cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch, ...): its name, the
-- step it was made in (NULL: outside every step), and the latency from the call's start to the start of its
-- first kernel (a graph replay's kernels all carry the replay's id; a replay traced whole is its own op). Copies and memsets are left out: their
-- calls often block until the copy is done. Queued launches wait behind earlier work, so a long latency is
-- a deep queue (the host ahead of the GPU, as pipelining wants), a short one a GPU that waits for the host.
WITH first_kernel AS (
    SELECT pid, correlation_id, min(start) AS kernel_start, count(*) AS kernels
    FROM gpu_ops
    WHERE run_id = $run_id AND op IN ('kernel', 'graph') AND correlation_id IS NOT NULL
    GROUP BY pid, correlation_id
)
SELECT a.name AS api, a.step, a.start AS call_start, k.kernel_start, k.kernels,
       (k.kernel_start - a.start) / 1e3 AS latency_us
FROM first_kernel k
JOIN api_calls a ON a.run_id = $run_id AND a.pid = k.pid AND a.correlation_id = k.correlation_id
ORDER BY a.start
