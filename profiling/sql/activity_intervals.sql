-- Which intervals of a foreign run need the engine thread's activity (host_activity.sql, at ingest)? Every
-- bubble gap (idle gaps of at least $gap_ns) of any step, and the start instant of every host sync the engine
-- thread made (host_syncs) that no bubble gap holds: disjoint, in time order.
WITH gaps AS (
    SELECT start, "end" FROM idle_gaps WHERE run_id = $run_id AND "end" - start >= $gap_ns
),
points AS (
    SELECT DISTINCT start_ns AS start, start_ns + 1 AS "end" FROM host_syncs WHERE run_id = $run_id AND engine
),
loose AS (
    SELECT p.start, p."end" FROM points p ASOF LEFT JOIN gaps g ON p.start >= g.start
    WHERE g.start IS NULL OR p.start >= g."end"
)
SELECT start, "end" FROM gaps
UNION ALL
SELECT start, "end" FROM loose
ORDER BY start
