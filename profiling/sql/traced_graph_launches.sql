-- How long did the host spend in each CUDA-graph launch nsys traced, node by node (--cuda-graph-trace=node:
-- its kernels carry graph_node) or whole (=graph: one 'graph' op a replay)? Tracing makes every launch slow
-- on the host: measured on our engine (qwen3-0.6b), a cudaGraphLaunch held the host ~0.25 ms traced by node
-- and ~0.10 ms traced whole, against a few tens of us unprofiled, and a blocking loop exposes all of it as
-- bubble: costmodel.foreign says how much of the step's host time it is. One row per launch in a step: its
-- step, name, host time and whether its replay was traced whole.
WITH replays AS (
    SELECT pid, correlation_id, any_value(step) AS step, bool_and(op = 'graph') AS whole
    FROM gpu_ops
    WHERE run_id = $run_id AND graph_node IS NOT NULL AND step IS NOT NULL
    GROUP BY pid, correlation_id
)
SELECT r.step, c.name, (c."end" - c.start) / 1e6 AS host_ms, r.whole
FROM replays r
JOIN api_calls c ON c.run_id = $run_id AND c.pid = r.pid AND c.correlation_id = r.correlation_id
ORDER BY c.start
