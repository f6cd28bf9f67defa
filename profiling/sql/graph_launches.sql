-- Which calls of the engine thread ($tid) replayed a CUDA graph, and how large was each replay? A call is a
-- graph launch because the ops it launched are graph nodes (node-level tracing sets their graphNodeId) or a
-- whole replay (op 'graph', --cuda-graph-trace=graph), whatever its name (cudaGraphLaunch, cuGraphLaunch, a
-- framework's own wrapper). ops: the nodes seen (1 for a replay traced whole); gpu_ns: its ops' GPU time.
SELECT launched_at AS start, correlation_id, count(*) AS ops, sum("end" - start) AS gpu_ns
FROM gpu_ops
WHERE run_id = $run_id AND tid = $tid AND graph_node IS NOT NULL
GROUP BY launched_at, correlation_id
ORDER BY start
