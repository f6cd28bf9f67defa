-- Which host thread drives the GPU? The thread whose CUDA calls launched the most GPU ops (kernels, copies
-- and memsets, each matched to its call by correlation id): a foreign engine's loop thread.
SELECT tid, count(*) AS ops
FROM gpu_ops
WHERE run_id = $run_id AND tid IS NOT NULL
GROUP BY tid
ORDER BY ops DESC, tid
LIMIT 1
