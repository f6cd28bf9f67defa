-- How long did the host spend in each CUDA-graph launch whose replay was traced node by node
-- (--cuda-graph-trace=node: its kernels carry graph_node)? Under node tracing nsys adds ~0.25 ms to every such
-- launch (an H100, against a few us unprofiled), which a blocking loop exposes as bubble: costmodel.foreign
-- says how much of the step's host time it is. One row per launch in a step: its step, name and host time.
WITH replays AS (
    SELECT pid, correlation_id, any_value(step) AS step
    FROM gpu_ops
    WHERE run_id = $run_id AND op <> 'graph' AND graph_node IS NOT NULL AND step IS NOT NULL
    GROUP BY pid, correlation_id
)
SELECT r.step, c.name, (c."end" - c.start) / 1e6 AS host_ms
FROM replays r
JOIN api_calls c ON c.run_id = $run_id AND c.pid = r.pid AND c.correlation_id = r.correlation_id
ORDER BY c.start
