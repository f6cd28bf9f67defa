-- CUDA runtime/driver calls of the run's process ($pid; NULL: all), each labelled ($labelled: a run read by
-- our ranges) with the innermost host range it started in (ASOF on segments).
INSERT INTO api_calls
WITH calls AS (
    SELECT r.globalTid AS tid,
           r.globalTid - r.globalTid % 16777216 AS pid,   -- globalPid: the tid bits cleared
           r.start, r."end", r.correlationId AS correlation_id, s.value AS name
    FROM ns.CUPTI_ACTIVITY_KIND_RUNTIME r
    JOIN ns.StringIds s ON s.id = r.nameId
    WHERE $pid IS NULL OR r.globalTid - r.globalTid % 16777216 = $pid
),
segments AS (
    SELECT tid, start, "end", phase, step FROM host_segments WHERE run_id = $run_id
)
SELECT $run_id, c.tid, c.pid, c.start, c."end", c.correlation_id, c.name,
       CASE WHEN c.start < g."end" THEN g.phase END,
       CASE WHEN c.start < g."end" THEN g.step END
FROM calls c
ASOF LEFT JOIN segments g ON g.tid = c.tid AND c.start >= g.start
WHERE $labelled
UNION ALL  -- a foreign run has no segments: the join would sort a million calls for nothing
SELECT $run_id, tid, pid, start, "end", correlation_id, name, NULL, NULL FROM calls WHERE NOT $labelled
