-- Kernels, with the step and phase of the host range whose CUDA call launched them.
INSERT INTO gpu_ops
WITH launches AS (
    SELECT pid, correlation_id, phase, step FROM api_calls WHERE run_id = $run_id
)
SELECT $run_id, 'kernel', k.start, k."end", k.streamId, k.globalPid, k.correlationId, s.value,
       NULL, NULL, NULL, NULL, l.phase, l.step
FROM ns.CUPTI_ACTIVITY_KIND_KERNEL k
JOIN ns.StringIds s ON s.id = k.shortName
LEFT JOIN launches l ON l.pid = k.globalPid AND l.correlation_id = k.correlationId
