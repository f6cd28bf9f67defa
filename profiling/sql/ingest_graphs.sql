-- CUDA-graph replays traced whole (nsys --cuda-graph-trace=graph, its default) of the run's process and GPU
-- ($pid, $device; NULL: all): one GPU op per replay, op 'graph', named for its graph, its kernels unseen.
-- Linked to the call that launched it by correlation id, like a kernel; graph_node holds the graph's id, so
-- the step rules tell replays of different graphs apart as they do by node ids in a node-traced trace.
INSERT INTO gpu_ops
WITH launches AS (
    SELECT pid, correlation_id, start, tid, phase, step FROM api_calls WHERE run_id = $run_id
)
SELECT $run_id, 'graph', g.start, g."end", g.streamId, g.globalPid, g.correlationId,
       'CUDA graph ' || g.graphId || ' [whole replay]',
       NULL, NULL, NULL, NULL, l.start, l.phase, l.step, l.tid, g.graphId
FROM ns.CUPTI_ACTIVITY_KIND_GRAPH_TRACE g
LEFT JOIN launches l ON l.pid = g.globalPid AND l.correlation_id = g.correlationId
WHERE ($pid IS NULL OR g.globalPid = $pid) AND ($device IS NULL OR g.deviceId = $device)
