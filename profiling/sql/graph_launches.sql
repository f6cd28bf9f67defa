-- Which calls of the engine thread ($tid) replayed a CUDA graph, and how large is the graph each replayed? A call
-- is a graph launch because the ops it launched are graph nodes (node-level tracing sets their graphNodeId) or a
-- whole replay (op 'graph', --cuda-graph-trace=graph), whatever its name (cudaGraphLaunch, cuGraphLaunch, a
-- framework's own wrapper). ops: the nodes seen (1 for a replay traced whole); gpu_ns: its ops' GPU time;
-- graph_ops: the nodes of its graph, the most any replay spanning its node ids showed. A replay the capture
-- cut short shows part of its nodes, and is still a replay of its graph (the last decode step of our depth-2
-- traces: 177 of 510 nodes).
WITH replays AS (
    SELECT launched_at AS start, correlation_id, count(*) AS ops, sum("end" - start) AS gpu_ns,
           min(graph_node) AS lo, max(graph_node) AS hi
    FROM gpu_ops
    WHERE run_id = $run_id AND tid = $tid AND graph_node IS NOT NULL
    GROUP BY launched_at, correlation_id
),
shapes AS (
    SELECT DISTINCT lo, hi, ops FROM replays
),
graph_size AS (
    SELECT part.lo, part.hi, max(whole.ops) AS graph_ops
    FROM shapes AS part
    JOIN shapes AS whole ON whole.lo <= part.lo AND part.hi <= whole.hi
    GROUP BY part.lo, part.hi
)
SELECT r.start, r.correlation_id, r.ops, r.gpu_ns, g.graph_ops
FROM replays AS r
JOIN graph_size AS g USING (lo, hi)
ORDER BY r.start
