-- A foreign run's host syncs (host_syncs, foreign_sync_inventory.sql), each engine-thread row with the
-- innermost NVTX range it ran in (phase, from host_activity; 'outside any phase' when none was open).
WITH pieces AS (
    SELECT start, "end", nvtx FROM host_activity WHERE run_id = $run_id
)
SELECT s.event, s.api, s.detail,
       COALESCE(CASE WHEN s.engine AND s.start_ns < p."end" THEN p.nvtx END, 'outside any phase') AS phase,
       s.step, s.start_ns, s.host_us, s.flagged, s.reason, s.bytes, s.closing, s.after
FROM (FROM host_syncs WHERE run_id = $run_id) s
ASOF LEFT JOIN pieces p ON s.start_ns >= p.start
ORDER BY s.start_ns, s.event
