-- What was the engine thread ($tid) doing, at every instant? Three layers, each cut into segments of its
-- innermost open interval (the sweep of host_segments.sql: running nesting depth, latest interval opened
-- at that depth):
--   cuda  its CUDA calls, named for what they did: 'graph launch', 'kernel launch', 'memcpy <kind>',
--         'memset' (by the ops they launched, matched by correlation id), 'synchronize' (a CUPTI sync
--         record, or a *Synchronize call), 'graph-exec update' (cu(da)GraphExec*), else the call's name
--   os    its OS runtime calls (nsys -t osrt), by name
--   nvtx  its innermost NVTX range (host_segments)
-- then combined into disjoint intervals labelled by the most specific layer open: the CUDA call, else the OS
-- call, else 'nvtx: <range>' (untraced code inside a range the user named), else 'untraced host code'.
INSERT INTO host_activity
WITH launched AS (
    SELECT pid, correlation_id,
           bool_or(graph_node IS NOT NULL) AS graph,
           bool_or(op = 'kernel') AS kernel,
           max(CASE WHEN op = 'memcpy' THEN name END) AS copy,
           bool_or(op = 'memset') AS memset
    FROM gpu_ops WHERE run_id = $run_id AND tid = $tid
    GROUP BY ALL
),
sync_records AS (
    SELECT pid, correlation_id, bool_or(sync_type IN (1, 3, 4)) AS blocks
    FROM syncs WHERE run_id = $run_id
    GROUP BY ALL
),
cuda AS (
    SELECT 'cuda' AS layer, c.start, c."end",
           CASE WHEN l.graph THEN 'graph launch'
                WHEN l.kernel THEN 'kernel launch'
                WHEN l.copy IS NOT NULL THEN 'memcpy ' || l.copy
                WHEN l.memset THEN 'memset'
                WHEN regexp_matches(c.name, '^cu(da)?(EventQuery|StreamQuery)') THEN 'query (poll)'
                WHEN r.blocks OR regexp_matches(c.name, '^cu(da)?(Device|Ctx|Stream|Event)Synchronize')
                THEN 'synchronize'
                WHEN regexp_matches(c.name, '^cu(da)?GraphExec') THEN 'graph-exec update'
                ELSE regexp_replace(c.name, '_v\d+$', '') END AS label
    FROM api_calls c
    LEFT JOIN launched l USING (pid, correlation_id)
    LEFT JOIN sync_records r USING (pid, correlation_id)
    WHERE c.run_id = $run_id AND c.tid = $tid
),
os AS (
    SELECT 'os' AS layer, start, "end", name AS label FROM os_calls WHERE run_id = $run_id AND tid = $tid
),
ranges AS (
    SELECT row_number() OVER () AS id, * FROM (FROM cuda UNION ALL FROM os) WHERE "end" > start
),
edges AS (  -- at equal times: ends before starts, inner ends before outer ends, outer starts first
    SELECT layer, start AS ts, 1 AS delta, id AS opened, 1 AS tie, -"end" AS tie2 FROM ranges
    UNION ALL
    SELECT layer, "end", -1, NULL, 0, -start FROM ranges
),
ordered AS (
    SELECT *, row_number() OVER (PARTITION BY layer ORDER BY ts, tie, tie2) AS seq FROM edges
),
depths AS (
    SELECT *, sum(delta) OVER (PARTITION BY layer ORDER BY seq) AS depth FROM ordered
),
innermost AS (
    SELECT layer, ts, lead(ts) OVER (PARTITION BY layer ORDER BY seq) AS next_ts,
           CASE WHEN depth > 0 THEN last_value(opened IGNORE NULLS)
                OVER (PARTITION BY layer, depth ORDER BY seq ROWS UNBOUNDED PRECEDING) END AS id
    FROM depths
),
layer_segments AS (
    SELECT i.layer, i.ts AS start, i.next_ts AS "end", r.label
    FROM innermost i JOIN ranges r USING (id)
    WHERE i.next_ts > i.ts
    UNION ALL
    SELECT 'nvtx', start, "end", phase FROM host_segments WHERE run_id = $run_id AND tid = $tid
),
layer_edges AS (  -- a segment's start sets its layer's value, its end clears it ('')
    SELECT start AS ts, 1 AS tie, layer, label FROM layer_segments
    UNION ALL
    SELECT "end", 0, layer, '' FROM layer_segments
),
swept AS (
    SELECT ts,
           lead(ts) OVER w AS next_ts,
           NULLIF(last_value(CASE layer WHEN 'cuda' THEN label END IGNORE NULLS) OVER w, '') AS cuda,
           NULLIF(last_value(CASE layer WHEN 'os' THEN label END IGNORE NULLS) OVER w, '') AS os,
           NULLIF(last_value(CASE layer WHEN 'nvtx' THEN label END IGNORE NULLS) OVER w, '') AS nvtx
    FROM (SELECT *, row_number() OVER (ORDER BY ts, tie) AS seq FROM layer_edges)
    WINDOW w AS (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT $run_id, ts, next_ts, cuda, os, nvtx,
       CASE WHEN cuda IS NOT NULL THEN 'cuda: ' || cuda
            WHEN os IS NOT NULL THEN 'os: ' || os
            WHEN nvtx IS NOT NULL THEN 'nvtx: ' || nvtx
            ELSE 'untraced host code' END
FROM swept
WHERE next_ts > ts
