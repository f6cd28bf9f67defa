-- Give a foreign run's GPU ops and sync points the step whose host window (table step_windows) holds their
-- start (for GPU ops: the start of the call that launched them). Any thread of the process counts: windows
-- are times. (A foreign run's api_calls keep no step: the few rows that need one look it up.)

UPDATE gpu_ops SET step = w.step
FROM (SELECT o.rowid AS rid, s.step
      FROM gpu_ops o ASOF JOIN (FROM step_windows WHERE run_id = $run_id) s ON o.launched_at >= s.host_start
      WHERE o.run_id = $run_id AND o.launched_at < s.host_end) w
WHERE gpu_ops.rowid = w.rid;

UPDATE sync_points SET step = w.step
FROM (SELECT p.rowid AS rid, s.step
      FROM sync_points p ASOF JOIN (FROM step_windows WHERE run_id = $run_id) s ON p.start >= s.host_start
      WHERE p.run_id = $run_id AND p.start < s.host_end) w
WHERE sync_points.rowid = w.rid;

