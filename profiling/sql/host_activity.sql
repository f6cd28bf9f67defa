-- What was the engine thread ($tid) doing during each of the given intervals (relation `intervals`: start,
-- end; disjoint and sorted: activity_intervals.sql)? Labelled pieces that tile every interval, stored at
-- ingest in host_activity.
-- Three layers, each cut into segments of its innermost open interval (the sweep of host_segments.sql:
-- running nesting depth, latest interval opened at that depth):
--   cuda  its CUDA calls, named for what they did: 'graph launch', 'kernel launch', 'memcpy <kind>',
--         'memset' (by the ops they launched, matched by correlation id), 'synchronize' (a CUPTI sync
--         record, or a *Synchronize call), 'graph-exec update' (cu(da)GraphExec*), else the call's name
--   os    its OS runtime calls (nsys -t osrt), by name
--   nvtx  its NVTX ranges (any domain), by name
-- A piece's label is the most specific layer open: the CUDA call, else the OS call, else 'nvtx: <range>'
-- (untraced code inside a range the user named), else 'untraced host code'.
-- Only the calls and ranges that overlap an interval take part (the last interval starting before a row's
-- end tells: intervals are disjoint and sorted), so the sweep stays small however long the trace is; a
-- range that contains an overlapping one overlaps too, so nesting is never cut.
INSERT INTO host_activity
WITH spans AS (
    SELECT start, "end" FROM intervals
),
sync_records AS (
    SELECT pid, correlation_id, bool_or(sync_type IN (1, 3, 4)) AS blocks
    FROM syncs WHERE run_id = $run_id
    GROUP BY ALL
),
rows AS (
    SELECT 'cuda' AS layer, start, "end", pid, correlation_id, name
    FROM api_calls WHERE run_id = $run_id AND tid = $tid
    UNION ALL
    SELECT 'os', start, "end", NULL, NULL, name FROM os_calls WHERE run_id = $run_id AND tid = $tid
    UNION ALL
    SELECT 'nvtx', start, "end", NULL, NULL, name FROM host_ranges WHERE run_id = $run_id AND tid = $tid
),
overlapping AS (
    SELECT r.* FROM rows r ASOF JOIN spans s ON r."end" > s.start
    WHERE r.start < s."end" AND r."end" > r.start
),
launched AS (  -- what the overlapping calls launched (not every call's ops: a million, perhaps)
    SELECT pid, correlation_id,
           bool_or(graph_node IS NOT NULL) AS graph,
           bool_or(op = 'kernel') AS kernel,
           max(CASE WHEN op = 'memcpy' THEN name END) AS copy,
           bool_or(op = 'memset') AS memset
    FROM gpu_ops
    SEMI JOIN (FROM overlapping WHERE layer = 'cuda') USING (pid, correlation_id)
    WHERE run_id = $run_id AND tid = $tid
    GROUP BY ALL
),
labelled AS (
    SELECT row_number() OVER () AS id, o.layer, o.start, o."end",
           CASE WHEN o.layer <> 'cuda' THEN o.name
                WHEN l.graph THEN 'graph launch'
                WHEN l.kernel THEN 'kernel launch'
                WHEN l.copy IS NOT NULL THEN 'memcpy ' || l.copy
                WHEN l.memset THEN 'memset'
                WHEN regexp_matches(o.name, '^cu(da)?(EventQuery|StreamQuery)') THEN 'query (poll)'
                WHEN r.blocks OR regexp_matches(o.name, '^cu(da)?(Device|Ctx|Stream|Event)Synchronize')
                THEN 'synchronize'
                WHEN regexp_matches(o.name, '^cu(da)?GraphExec') THEN 'graph-exec update'
                ELSE regexp_replace(o.name, '_v\d+$', '') END AS label
    FROM overlapping o
    LEFT JOIN launched l USING (pid, correlation_id)
    LEFT JOIN sync_records r USING (pid, correlation_id)
),
edges AS (  -- at equal times: ends before starts, inner ends before outer ends, outer starts first
    SELECT layer, start AS ts, 1 AS delta, id AS opened, 1 AS tie, -"end" AS tie2 FROM labelled
    UNION ALL
    SELECT layer, "end", -1, NULL, 0, -start FROM labelled
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
    SELECT i.layer, i.ts AS start, i.next_ts AS "end", l.label
    FROM innermost i JOIN labelled l USING (id)
    WHERE i.next_ts > i.ts
),
all_edges AS (  -- a segment's start sets its layer's value, its end clears it (''); spans count `inside`
    SELECT start AS ts, 1 AS tie, layer, label, 0 AS inside_delta FROM layer_segments
    UNION ALL SELECT "end", 0, layer, '', 0 FROM layer_segments
    UNION ALL SELECT start, 2, NULL, NULL, 1 FROM spans
    UNION ALL SELECT "end", 2, NULL, NULL, -1 FROM spans
),
swept AS (
    SELECT ts,
           lead(ts) OVER w AS next_ts,
           sum(inside_delta) OVER w AS inside,
           NULLIF(last_value(CASE layer WHEN 'cuda' THEN label END IGNORE NULLS) OVER w, '') AS cuda,
           NULLIF(last_value(CASE layer WHEN 'os' THEN label END IGNORE NULLS) OVER w, '') AS os,
           NULLIF(last_value(CASE layer WHEN 'nvtx' THEN label END IGNORE NULLS) OVER w, '') AS nvtx
    FROM (SELECT *, row_number() OVER (ORDER BY ts, tie, inside_delta) AS seq FROM all_edges)
    WINDOW w AS (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT $run_id, ts AS start, next_ts AS "end", cuda, os, nvtx,
       CASE WHEN cuda IS NOT NULL THEN 'cuda: ' || cuda
            WHEN os IS NOT NULL THEN 'os: ' || os
            WHEN nvtx IS NOT NULL THEN 'nvtx: ' || nvtx
            ELSE 'untraced host code' END AS label
FROM swept
WHERE inside > 0 AND next_ts > ts
