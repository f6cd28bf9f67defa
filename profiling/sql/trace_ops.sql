-- Every kernel, copy and CUDA API call of one run: the tracks a user opens the Chrome/Perfetto export for
-- (bubblelab.report.perfetto), with what links each launch to its work. lane: 'kernel' (a kernel or a graph
-- replay traced whole; tid = the stream),
-- 'copy' (memcpy and memset; tid = the stream) or 'api' (tid = the host thread); phase: the name; flow: 'out'
-- on an API call that launched GPU work, 'in' on the first op that call launched (a graph replay's nodes share
-- its correlation id), so each arrow runs from a launch to where its work began. $first_step, $last_step: only
-- what the steps between them launched (both NULL: everything, outside steps too).
WITH ops AS (
    SELECT CASE WHEN op IN ('kernel', 'graph') THEN 'kernel' ELSE 'copy' END AS lane, name, step, stream_id AS tid,
           start, "end", pid, correlation_id,
           row_number() OVER (PARTITION BY pid, correlation_id ORDER BY start, "end") AS nth
    FROM gpu_ops
    WHERE run_id = $run_id AND op IN ('kernel', 'graph', 'memcpy', 'memset')
      AND ($first_step IS NULL OR step BETWEEN $first_step AND $last_step)
),
launched AS (
    SELECT DISTINCT pid, correlation_id FROM ops WHERE correlation_id IS NOT NULL
)
SELECT lane, name AS phase, step, tid, start AS start_ns, "end" AS end_ns, correlation_id,
       CASE WHEN nth = 1 AND correlation_id IS NOT NULL THEN 'in' END AS flow
FROM ops
UNION ALL
SELECT 'api', a.name, a.step, a.tid, a.start, a."end", a.correlation_id,
       CASE WHEN l.correlation_id IS NOT NULL THEN 'out' END
FROM api_calls a
LEFT JOIN launched l ON l.pid = a.pid AND l.correlation_id = a.correlation_id
WHERE a.run_id = $run_id AND ($first_step IS NULL OR a.step BETWEEN $first_step AND $last_step)
ORDER BY lane, start_ns, end_ns DESC
