-- Where does the host block on the GPU, and which copies force it to? One row per
--   * host-blocking CUDA call: one that blocks by definition (cu*/cuda* Device/Ctx/Stream/Event Synchronize,
--     synchronous cudaMemcpy/cuMemcpy*) or that CUPTI recorded as an event/stream/context synchronization,
--   * device-to-host copy, and copy to or from pageable host memory (synchronous even when "Async"),
-- with the phase and step it happened in. Not listed, because they never block the host: polls
-- (cudaEventQuery, cudaStreamQuery; CUPTI still writes an "event sync" record for each query) and
-- cudaStreamWaitEvent (syncType 2: the *device* stream waits). In the engine traces the ~8 cudaEventQuery
-- calls a step, right after `commit`, are torch.cuda.Event.elapsed_time checking query() on both events
-- before cudaEventElapsedTime: the in-process timeline reading the step's 4 CUDA event times.
-- `flagged` marks the rows that stall the pipeline during the loop (between the engine's first and last
-- range): the only intended sync is the event sync in `wait` (step t's copy), and a DtoH copy belongs in
-- `copy_d2h` on pinned memory.
WITH calls AS (
    SELECT tid, pid, start, "end", correlation_id, name, phase, step FROM api_calls WHERE run_id = $run_id
),
engine_loop AS (
    SELECT min(start) AS first_ns, max("end") AS last_ns FROM host_ranges WHERE run_id = $run_id
),
sync_records AS (
    SELECT pid, correlation_id, any_value(sync_type) AS sync_type
    FROM syncs WHERE run_id = $run_id GROUP BY ALL
),
blocking_calls AS (
    SELECT c.*, r.sync_type
    FROM calls c LEFT JOIN sync_records r USING (pid, correlation_id)
    WHERE NOT regexp_matches(c.name, '^cu(da)?(EventQuery|StreamQuery|StreamWaitEvent)')
      AND (r.sync_type IS DISTINCT FROM 2 AND r.sync_type IS NOT NULL
           OR regexp_matches(c.name, '^cu(da)?(Device|Ctx|Stream|Event)Synchronize')
           OR regexp_matches(c.name, '^cu(da)?Memcpy(2D|3D|DtoH|HtoD|DtoD|AtoH|HtoA)?(_v\d+)?$'))
),
copies AS (
    SELECT o.start, o."end", o.name AS copy, o.bytes, o.src_kind = 0 OR o.dst_kind = 0 AS pageable,
           c.name AS api, c.start AS api_start, c."end" AS api_end, c.phase, c.step
    FROM gpu_ops o JOIN calls c USING (pid, correlation_id)
    WHERE o.run_id = $run_id AND o.op = 'memcpy' AND (o.copy_kind = 2 OR o.src_kind = 0 OR o.dst_kind = 0)
),
inventory AS (
    SELECT 'sync' AS event, name AS api,
           CASE sync_type WHEN 1 THEN 'event sync' WHEN 3 THEN 'stream sync' WHEN 4 THEN 'context sync'
                          ELSE 'blocking call' END AS detail,
           start AS start_ns, ("end" - start) / 1e3 AS host_us, COALESCE(phase, 'outside any phase') AS phase,
           step,
           CASE WHEN phase IS DISTINCT FROM 'wait' THEN 'host blocks outside wait'
                WHEN NOT (sync_type = 1 OR regexp_matches(name, 'EventSynchronize'))
                THEN 'wait blocks on more than the step''s copy event' END AS reason
    FROM blocking_calls
    UNION ALL
    SELECT 'copy', api, copy || CASE WHEN pageable THEN ' pageable' ELSE ' pinned' END || ' ' || bytes || ' B',
           api_start, (api_end - api_start) / 1e3, COALESCE(phase, 'outside any phase'), step,
           NULLIF(concat_ws('; ', CASE WHEN pageable THEN 'pageable memory: the copy is synchronous' END,
                            CASE WHEN copy = 'DtoH' AND phase IS DISTINCT FROM 'copy_d2h'
                                 THEN 'DtoH outside copy_d2h' END), '')
    FROM copies
)
SELECT event, api, detail, phase, step, start_ns, host_us, flagged, CASE WHEN flagged THEN reason END AS reason
FROM (SELECT i.*, i.reason IS NOT NULL AND i.start_ns BETWEEN l.first_ns AND l.last_ns AS flagged
      FROM inventory i, engine_loop l)
ORDER BY start_ns
