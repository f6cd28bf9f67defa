-- Every host range and every step's forward and sampling span of one run, unmerged and for all steps:
-- the tracks of the Chrome/Perfetto export (bubblelab.report.perfetto). host: our domain's ranges as
-- recorded, on their thread; gpu: the spans of sql/step_spans.sql (part = 'forward' | 'sampling').
SELECT 'host' AS lane, name AS phase, step, tid, start AS start_ns, "end" AS end_ns
FROM host_ranges
WHERE run_id = $run_id
UNION ALL
SELECT 'gpu' AS lane, part AS phase, step, NULL AS tid, start AS start_ns, "end" AS end_ns
FROM step_spans
WHERE run_id = $run_id AND "end" > start
ORDER BY lane, start_ns, end_ns DESC
