-- Which NVTX ranges are the steps (--step-range)? Those of the run's process ($pid; NULL: all) whose name
-- matches $regex (RE2 syntax, a search: any domain, push/pop or start/end), on the thread that holds the most
-- of them. A match inside another one (a regex that also catches an inner range) belongs to that step.
-- Step k's host window runs from its range's start to the next step's start: what the loop launches between
-- two step ranges belongs to the earlier step. The last step's window ends with its range.
WITH ranges AS (
    SELECT e.globalTid AS tid, e.start, e."end", COALESCE(s.value, e.text) AS name
    FROM ns.NVTX_EVENTS e
    LEFT JOIN ns.StringIds s ON s.id = e.textId
    WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL
      AND ($pid IS NULL OR e.globalTid - e.globalTid % 16777216 = $pid)
),
matches AS (
    SELECT tid, start, "end" FROM ranges WHERE regexp_matches(name, $regex)
),
thread AS (
    SELECT tid FROM matches GROUP BY tid ORDER BY count(*) DESC, tid LIMIT 1
),
outermost AS (  -- a match starting before an earlier match has ended lies inside it
    SELECT start, "end",
           max("end") OVER (ORDER BY start, "end" DESC
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM matches WHERE tid = (FROM thread)
)
SELECT row_number() OVER (ORDER BY start) - 1 AS step,
       start AS host_start,
       COALESCE(lead(start) OVER (ORDER BY start), "end") AS host_end,
       (FROM thread) AS tid
FROM outermost
WHERE reach IS NULL OR start >= reach
ORDER BY step
