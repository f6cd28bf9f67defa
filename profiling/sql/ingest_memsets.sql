-- Memsets, attributed like kernels.
INSERT INTO gpu_ops
WITH launches AS (
    SELECT pid, correlation_id, start, tid, phase, step FROM api_calls WHERE run_id = $run_id
)
SELECT $run_id, 'memset', m.start, m."end", m.streamId, m.globalPid, m.correlationId, 'memset',
       m.bytes, NULL, NULL, NULL, l.start, l.phase, l.step, l.tid, m.graphNodeId
FROM ns.CUPTI_ACTIVITY_KIND_MEMSET m
LEFT JOIN launches l ON l.pid = m.globalPid AND l.correlation_id = m.correlationId
WHERE ($pid IS NULL OR m.globalPid = $pid) AND ($device IS NULL OR m.deviceId = $device)
