-- Where does a foreign engine's host wait for the GPU? One row per host-blocking CUDA call (the rule of
-- sync_points.sql: a CUPTI event/stream/context sync record or a *Synchronize / synchronous memcpy call;
-- never a poll or a stream wait) and per device-to-host copy or copy touching pageable host memory, of any
-- thread of the run's process, with its step, whether the engine thread made it (`engine`; foreign_syncs.sql
-- adds the NVTX range it ran in), its bytes, and the kernel the engine thread launched last before it
-- (`after`: what the host is waiting to read). Derived at ingest into host_syncs.
-- A blocking engine needs one sync point a step, the one that closes it (the last of its step); every
-- other blocking row of the engine thread inside a step is `flagged`: the host waited for the GPU mid-step
-- (PyPI nano-vllm-fork: one `.item()` per sequence, 128 extra a step at 128 sequences). A pipelined loop
-- must have none of them on its critical path.
INSERT INTO host_syncs
WITH calls AS (
    SELECT tid, pid, start, "end", correlation_id, name FROM api_calls WHERE run_id = $run_id
),
sync_records AS (
    SELECT pid, correlation_id, any_value(sync_type) AS sync_type
    FROM syncs WHERE run_id = $run_id GROUP BY ALL
),
names AS (  -- the names' rules, read once per distinct name, not once per call
    SELECT name,
           regexp_matches(name, '^cu(da)?(Device|Ctx|Stream|Event)Synchronize')
             OR regexp_matches(name, '^cu(da)?Memcpy(2D|3D|DtoH|HtoD|DtoD|AtoH|HtoA)?(_v\d+)?$') AS blocks,
           regexp_matches(name, '^cu(da)?(EventQuery|StreamQuery|StreamWaitEvent)') AS poll
    FROM (SELECT DISTINCT name FROM calls)
),
blocking_calls AS (
    SELECT c.*, r.sync_type
    FROM calls c
    JOIN names n USING (name)
    LEFT JOIN sync_records r USING (pid, correlation_id)
    WHERE NOT n.poll AND (r.sync_type IN (1, 3, 4) OR n.blocks)
),
copies AS (
    SELECT o.name AS copy, o.bytes, o.src_kind = 0 OR o.dst_kind = 0 AS pageable, c.*
    FROM gpu_ops o JOIN calls c USING (pid, correlation_id)
    WHERE o.run_id = $run_id AND o.op = 'memcpy' AND (o.copy_kind = 2 OR o.src_kind = 0 OR o.dst_kind = 0)
),
rows AS (
    SELECT 'sync' AS event, name AS api,
           CASE sync_type WHEN 1 THEN 'event sync' WHEN 3 THEN 'stream sync' WHEN 4 THEN 'context sync'
                          ELSE 'blocking call' END AS detail,
           NULL::BIGINT AS bytes, tid, start, "end"
    FROM blocking_calls
    UNION ALL
    SELECT 'copy', name, copy || CASE WHEN pageable THEN ' pageable' ELSE ' pinned' END || ' ' || bytes || ' B',
           bytes, tid, start, "end"
    FROM copies
),
inventory AS (  -- each row in the step whose host window holds its start
    SELECT r.*, CASE WHEN r.start < w.host_end THEN w.step END AS step
    FROM rows r ASOF LEFT JOIN (FROM step_windows WHERE run_id = $run_id) w ON r.start >= w.host_start
),
closing AS (  -- the last sync point of each step
    SELECT step, max(point) AS point FROM sync_points WHERE run_id = $run_id AND step IS NOT NULL GROUP BY step
),
points AS (
    SELECT p.point, p.start, p."end", p.point = c.point AS closes
    FROM sync_points p LEFT JOIN closing c USING (step)
    WHERE p.run_id = $run_id
),
engine AS (
    SELECT engine_tid AS tid FROM step_rules WHERE run_id = $run_id
),
launches AS (  -- the engine thread's kernel (or whole-graph) launches in time order, named by their first op
    SELECT launched_at, arg_min(name, start) AS name
    FROM gpu_ops WHERE run_id = $run_id AND tid = (FROM engine) AND op IN ('kernel', 'graph')
    GROUP BY launched_at
),
placed AS (  -- each row with the engine thread's sync point it falls in, if any
    SELECT i.*, i.tid = (FROM engine) AND i.start <= p."end" AS in_point, p.closes, l.name AS after
    FROM inventory i
    ASOF LEFT JOIN points p ON i.start >= p.start
    ASOF LEFT JOIN launches l ON i.start > l.launched_at
),
judged AS (
    SELECT *, step IS NOT NULL AND tid = (FROM engine) AND NOT COALESCE(in_point AND closes, false) AS mid_step
    FROM placed
)
SELECT $run_id, event, api, detail, tid = (FROM engine) AS engine, step,
       start AS start_ns, ("end" - start) / 1e3 AS host_us,
       mid_step AS flagged,
       CASE WHEN mid_step THEN 'the host waits for the GPU mid-step, before the step''s closing sync' END
           AS reason,
       bytes, COALESCE(in_point AND closes, false) AS closing, after
FROM judged
