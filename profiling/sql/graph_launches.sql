-- Which calls of the engine thread ($tid) replayed a CUDA graph, and how many ops did each replay run? A
-- call is a graph launch because the ops it launched are graph nodes (node-level tracing sets their
-- graphNodeId), whatever its name (cudaGraphLaunch, cuGraphLaunch, a framework's own wrapper).
SELECT launched_at AS start, correlation_id, count(*) AS ops
FROM gpu_ops
WHERE run_id = $run_id AND tid = $tid AND graph_node IS NOT NULL
GROUP BY launched_at, correlation_id
ORDER BY start
