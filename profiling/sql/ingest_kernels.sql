-- Kernels, with the host time of the CUDA call that launched them and the step and phase it ran in.
INSERT INTO gpu_ops
WITH launches AS (
    SELECT pid, correlation_id, start, phase, step FROM api_calls WHERE run_id = $run_id
)
SELECT $run_id, 'kernel', k.start, k."end", k.streamId, k.globalPid, k.correlationId, s.value,
       NULL, NULL, NULL, NULL, l.start, l.phase, l.step
FROM ns.CUPTI_ACTIVITY_KIND_KERNEL k
JOIN ns.StringIds s ON s.id = k.shortName
LEFT JOIN launches l ON l.pid = k.globalPid AND l.correlation_id = k.correlationId
