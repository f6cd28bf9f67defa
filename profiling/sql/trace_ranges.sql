-- Every host range and every step's forward and sampling span of one run, unmerged and for all steps:
-- the tracks of the Chrome/Perfetto export (bubblelab.report.perfetto). host: our domain's ranges as
-- recorded, on their thread; gpu: the spans of sql/step_spans.sql (part = 'forward' | 'sampling'); wait: the
-- engine thread's host sync points (sql/sync_points.sql), what a foreign trace without ranges shows of its
-- host (its steps found by the sync rule; none for bubblelab's own runs).
SELECT 'host' AS lane, name AS phase, step, tid, start AS start_ns, "end" AS end_ns
FROM host_ranges
WHERE run_id = $run_id
UNION ALL
SELECT 'gpu' AS lane, part AS phase, step, NULL AS tid, start AS start_ns, "end" AS end_ns
FROM step_spans
WHERE run_id = $run_id AND "end" > start
UNION ALL
SELECT 'wait' AS lane, 'wait' AS phase, step, NULL AS tid, start AS start_ns, "end" AS end_ns
FROM sync_points
WHERE run_id = $run_id AND "end" > start
ORDER BY lane, start_ns, end_ns DESC
