-- Which NVTX ranges does the run's process ($pid; NULL: all) hold, most frequent first (named in the error
-- when steps cannot be found, so the user can pick one for --step-range)?
SELECT COALESCE(s.value, e.text) AS name, count(*) AS ranges
FROM ns.NVTX_EVENTS e
LEFT JOIN ns.StringIds s ON s.id = e.textId
WHERE e.eventType IN (59, 60) AND ($pid IS NULL OR e.globalTid - e.globalTid % 16777216 = $pid)
GROUP BY ALL
ORDER BY ranges DESC, name
LIMIT 5
