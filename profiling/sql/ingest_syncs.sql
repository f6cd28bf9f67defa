-- CUPTI synchronization records (syncType 1 event sync, 2 stream wait event, 3 stream sync, 4 context sync)
-- of the run's process ($pid; NULL: all).
INSERT INTO syncs
SELECT $run_id, start, "end", globalPid, correlationId, syncType, streamId
FROM ns.CUPTI_ACTIVITY_KIND_SYNCHRONIZATION
WHERE $pid IS NULL OR globalPid = $pid
