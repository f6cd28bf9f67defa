-- What the engine thread was doing during the given bubble gaps of a foreign run (relation `bubbles`: start,
-- end): the host_activity pieces inside them, which tile them; phase = the pieces' label.
WITH pieces AS (
    SELECT start, "end", label FROM host_activity WHERE run_id = $run_id
)
SELECT p.start, p."end", p.label AS phase
FROM pieces p ASOF JOIN bubbles b ON p.start >= b.start
WHERE p.start < b."end"
ORDER BY p.start
