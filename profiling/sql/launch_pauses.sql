-- When did the engine thread ($tid) launch GPU work, and how long had it paused before each launch? Its
-- launching calls (those whose correlation id a GPU op carries, other than a device-to-host copy: reading
-- the tokens back is where a step ends, and from pageable memory the host waits inside that very call) in
-- time order, each with the host time since every earlier launching call had ended: time the thread spent
-- elsewhere (waiting for the GPU inside or outside the CUDA API: a sync call, a copy back, a futex, a host
-- callback; doing its bookkeeping). NULL for the first. profiling/steps.py cuts the steps where the pause
-- recurs long once a step (rule 'pause').
WITH launched AS (
    SELECT DISTINCT pid, correlation_id FROM gpu_ops
    WHERE run_id = $run_id AND tid = $tid AND NOT (op = 'memcpy' AND copy_kind = 2)
),
calls AS (
    SELECT c.start, c."end"
    FROM api_calls c
    SEMI JOIN launched l ON l.pid = c.pid AND l.correlation_id = c.correlation_id
    WHERE c.run_id = $run_id AND c.tid = $tid
)
SELECT start,
       start - max("end") OVER (ORDER BY start, "end" ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pause
FROM calls
ORDER BY start, "end"
