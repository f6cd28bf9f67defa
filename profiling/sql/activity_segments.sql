-- The engine thread's host activity (host_activity.sql) of a foreign run as labelled segments: what the
-- bubble attribution labels a foreign run's idle time with.
SELECT start, "end", label AS phase FROM host_activity WHERE run_id = $run_id
