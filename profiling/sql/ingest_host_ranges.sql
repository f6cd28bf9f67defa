-- Host ranges of the run's process ($pid; NULL: all): those of our NVTX domain with their step payload, or,
-- when $domain is NULL (a foreign trace), every range of every domain (the default domain has no creation
-- event) with no step: their payloads are not ours to read.
-- Only push/pop ranges (eventType 59): they nest per thread, which host_segments relies on.
INSERT INTO host_ranges
WITH our_domain AS (  -- a domain-creation event (75) names the domain's id, per process
    SELECT DISTINCT domainId, globalTid - globalTid % 16777216 AS pid
    FROM ns.NVTX_EVENTS
    WHERE eventType = 75 AND text = $domain
),
ranges AS (
    SELECT start, "end", globalTid, textId, text, domainId, globalTid - globalTid % 16777216 AS pid,
           COALESCE(int64Value, uint64Value, int32Value, uint32Value) AS payload
    FROM ns.NVTX_EVENTS
    WHERE eventType = 59 AND "end" IS NOT NULL
      AND ($pid IS NULL OR globalTid - globalTid % 16777216 = $pid)
)
SELECT $run_id,
       row_number() OVER (),  -- an id (host_segments.sql orders by time itself)
       e.globalTid,
       e.start,
       e."end",
       COALESCE(s.value, e.text),
       CASE WHEN $domain IS NOT NULL THEN e.payload END
FROM ranges e
LEFT JOIN our_domain d ON d.domainId = e.domainId AND d.pid = e.pid
LEFT JOIN ns.StringIds s ON s.id = e.textId
WHERE $domain IS NULL OR d.domainId IS NOT NULL
