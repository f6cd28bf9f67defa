-- Host ranges of our NVTX domain, with their name and step payload.
-- Only push/pop ranges (eventType 59): they nest per thread, which host_segments relies on.
INSERT INTO host_ranges
WITH our_domain AS (  -- a domain-creation event (75) names the domain's id, per process
    SELECT DISTINCT domainId, globalTid - globalTid % 16777216 AS pid
    FROM ns.NVTX_EVENTS
    WHERE eventType = 75 AND text = $domain
)
SELECT $run_id,
       row_number() OVER (ORDER BY e.globalTid, e.start),
       e.globalTid,
       e.start,
       e."end",
       COALESCE(s.value, e.text),
       COALESCE(e.int64Value, e.uint64Value, e.int32Value, e.uint32Value)
FROM ns.NVTX_EVENTS e
JOIN our_domain d ON d.domainId = e.domainId AND d.pid = e.globalTid - e.globalTid % 16777216
LEFT JOIN ns.StringIds s ON s.id = e.textId
WHERE e.eventType = 59 AND e."end" IS NOT NULL
