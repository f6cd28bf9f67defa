-- The host segments (host_segments.sql: innermost range of our domain) of the engine thread, the thread
-- that opened the most ranges: what the bubble attribution of a bubblelab run labels idle time with.
WITH engine_thread AS (
    SELECT tid FROM host_ranges WHERE run_id = $run_id GROUP BY tid ORDER BY count(*) DESC, tid LIMIT 1
)
SELECT start, "end", phase FROM host_segments WHERE run_id = $run_id AND tid = (FROM engine_thread)
