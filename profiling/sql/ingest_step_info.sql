-- What each step was, from the `step_meta` marks of the run's process ($pid; NULL: all): "kind=<decode|prefill> bs=<rows> tokens=<n> depth=<d>".
INSERT INTO step_info
WITH our_domain AS (
    SELECT DISTINCT domainId, globalTid - globalTid % 16777216 AS pid
    FROM ns.NVTX_EVENTS
    WHERE eventType = 75 AND text = $domain
),
marks AS (
    SELECT COALESCE(e.int64Value, e.uint64Value, e.int32Value, e.uint32Value) AS step,
           arg_max(COALESCE(s.value, e.text), e.start) AS message   -- the latest mark wins
    FROM ns.NVTX_EVENTS e
    JOIN our_domain d ON d.domainId = e.domainId AND d.pid = e.globalTid - e.globalTid % 16777216
    LEFT JOIN ns.StringIds s ON s.id = e.textId
    WHERE e.eventType = 34 AND COALESCE(s.value, e.text) LIKE 'kind=%' AND ($pid IS NULL OR d.pid = $pid)
    GROUP BY ALL
)
SELECT $run_id,
       step,
       NULLIF(regexp_extract(message, 'kind=(\w+)', 1), ''),
       TRY_CAST(NULLIF(regexp_extract(message, 'bs=(\d+)', 1), '') AS INTEGER),
       TRY_CAST(NULLIF(regexp_extract(message, 'tokens=(\d+)', 1), '') AS INTEGER),
       TRY_CAST(NULLIF(regexp_extract(message, 'depth=(\d+)', 1), '') AS INTEGER)
FROM marks
