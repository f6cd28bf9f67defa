-- Copies (copyKind 1 HtoD, 2 DtoH, 8 DtoD; src/dstKind 0 = pageable host memory), attributed like kernels.
INSERT INTO gpu_ops
WITH launches AS (
    SELECT pid, correlation_id, start, tid, phase, step FROM api_calls WHERE run_id = $run_id
)
SELECT $run_id, 'memcpy', m.start, m."end", m.streamId, m.globalPid, m.correlationId,
       CASE m.copyKind WHEN 1 THEN 'HtoD' WHEN 2 THEN 'DtoH' WHEN 8 THEN 'DtoD' WHEN 10 THEN 'PtoP'
                       ELSE 'copy kind ' || m.copyKind END,
       m.bytes, m.copyKind, m.srcKind, m.dstKind, l.start, l.phase, l.step, l.tid, m.graphNodeId
FROM ns.CUPTI_ACTIVITY_KIND_MEMCPY m
LEFT JOIN launches l ON l.pid = m.globalPid AND l.correlation_id = m.correlationId
WHERE ($pid IS NULL OR m.globalPid = $pid) AND ($device IS NULL OR m.deviceId = $device)
