-- Where does the engine thread ($tid) wait for the GPU? Its host synchronisation points: runs of blocking
-- events with no other launch between them. A blocking event is a call that
--   * CUPTI recorded as an event, stream or context synchronization (not a stream wait, syncType 2, which
--     makes the device wait; not an EventQuery/StreamQuery poll, for which CUPTI writes a record too),
--   * blocks by definition (cu*/cuda* Device/Ctx/Stream/Event Synchronize, a synchronous cu*/cudaMemcpy;
--     nsys writes no sync records on some set-ups, so the name counts too),
--   * or launched a device-to-host copy (matched by correlation id): the sampled tokens coming back; from
--     pageable memory the host waits in that call itself.
-- A torch `.tolist()` (a DtoH cudaMemcpyAsync, then cudaStreamSynchronize) is one point; 128 `.item()` calls
-- in a Python loop that launches nothing in between are one point too (their calls are counted in `calls`).
-- Any other launch (a kernel, an upload, a memset, a graph) ends a point; next_launch is when the engine
-- thread made it, so next_launch - "end" is the host's work between the wait and the next GPU work: the
-- step's bookkeeping when the point closes a step (profiling/steps.py splits on it). `reads` counts the
-- device-to-host copies the point's calls launched: a point with none waited for nothing the host reads
-- (torch syncs after each upload from pageable memory: transformers' static cache does one per layer in its
-- prefill), so it cannot be where a step hands its tokens back (steps.py skips such points when others read).
INSERT INTO sync_points
WITH calls AS (
    SELECT start, "end", pid, correlation_id, name FROM api_calls WHERE run_id = $run_id AND tid = $tid
),
launched AS (  -- what each launching call of the thread put on the GPU (its ops carry its host time)
    SELECT pid, correlation_id, min(launched_at) AS start,
           bool_or(NOT (op = 'memcpy' AND copy_kind = 2)) AS compute,
           bool_or(op = 'memcpy' AND copy_kind = 2) AS dtoh
    FROM gpu_ops WHERE run_id = $run_id AND tid = $tid
    GROUP BY ALL
),
sync_records AS (
    SELECT pid, correlation_id, bool_or(sync_type IN (1, 3, 4)) AS blocks
    FROM syncs WHERE run_id = $run_id
    GROUP BY ALL
),
names AS (  -- the names' rules, read once per distinct name, not once per call
    SELECT name,
           regexp_matches(name, '^cu(da)?(Device|Ctx|Stream|Event)Synchronize')
             OR regexp_matches(name, '^cu(da)?Memcpy(2D|3D|DtoH|HtoD|DtoD|AtoH|HtoA)?(_v\d+)?$') AS blocks,
           regexp_matches(name, '^cu(da)?(EventQuery|StreamQuery|StreamWaitEvent)') AS poll
    FROM (SELECT DISTINCT name FROM calls)
),
blocking_calls AS (
    SELECT c.start, c."end", c.pid, c.correlation_id
    FROM calls c
    JOIN names n USING (name)
    LEFT JOIN sync_records r USING (pid, correlation_id)
    WHERE (n.blocks OR r.blocks) AND NOT n.poll
),
blocking AS (  -- blocking calls (did they read? a synchronous DtoH copy does), and the calls that
               -- launched nothing but a DtoH copy (a synchronous DtoH cudaMemcpy is both: UNION keeps it once)
    SELECT b.start, b."end", COALESCE(l.dtoh, false)::INTEGER AS reads
    FROM blocking_calls b
    LEFT JOIN launched l USING (pid, correlation_id)
    UNION
    SELECT c.start, c."end", 1
    FROM (FROM launched WHERE dtoh AND NOT compute) l
    JOIN calls c USING (pid, correlation_id)
),
events AS (
    SELECT start, "end", reads, false AS launch FROM blocking
    UNION ALL
    SELECT start, start, 0, true FROM launched WHERE compute
),
grouped AS (  -- a point is the blocking events after the same number of launches
    SELECT *, sum(launch::INTEGER) OVER (ORDER BY start, "end" ROWS UNBOUNDED PRECEDING) AS launches_before
    FROM events
),
launches AS (
    SELECT start, row_number() OVER (ORDER BY start, "end") AS nth FROM events WHERE launch
),
points AS (
    SELECT launches_before, min(start) AS start, max("end") AS "end", count(*) AS calls, sum(reads) AS reads
    FROM grouped WHERE NOT launch
    GROUP BY launches_before
)
SELECT $run_id, row_number() OVER (ORDER BY p.start), p.start, p."end", p.calls, p.reads, l.start, NULL
FROM points p
LEFT JOIN launches l ON l.nth = p.launches_before + 1
