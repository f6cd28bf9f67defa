-- Kernels of the run's process and GPU ($pid, $device; NULL: all), with the host time and thread of the
-- CUDA call that launched them (matched by correlation id within the process) and its step and phase.
INSERT INTO gpu_ops
WITH launches AS (
    SELECT pid, correlation_id, start, tid, phase, step FROM api_calls WHERE run_id = $run_id
)
SELECT $run_id, 'kernel', k.start, k."end", k.streamId, k.globalPid, k.correlationId, s.value,
       NULL, NULL, NULL, NULL, l.start, l.phase, l.step, l.tid, k.graphNodeId
FROM ns.CUPTI_ACTIVITY_KIND_KERNEL k
JOIN ns.StringIds s ON s.id = k.shortName
LEFT JOIN launches l ON l.pid = k.globalPid AND l.correlation_id = k.correlationId
WHERE ($pid IS NULL OR k.globalPid = $pid) AND ($device IS NULL OR k.deviceId = $device)
