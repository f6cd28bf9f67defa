-- Per-step table of a foreign run (steps found by profiling/steps.py, ops assigned by step_assignment.sql):
-- the columns of per_step.sql, by rules that need no phase names.
--   gpu_start   first GPU op (any kind, any stream) launched in the step's host window; gpu_end its last end
--   period      gpu_start of the next step minus this one's (NULL for the last step)
--   busy        union of ALL GPU activity inside the period (gpu_busy.sql: B(next start) - B(start))
--   idle        period - busy: the gaps between busy islands, each whole inside one period (a period edge is
--               an op start). A gap shorter than $gap_ns is a kernel gap (the launch floor between
--               back-to-back kernels, ~0.5-2.5 us on an H200); a longer one is bubble.
--   kernel_gap  sum of the short gaps; bubble: sum of the long ones. period = busy + kernel_gap + bubble.
--   forward     the step's GPU work with its own gaps: period - bubble (busy + kernel_gap); for the last
--               step, its ops' span. sampling is NULL: a foreign trace does not say which kernels sample.
--   wait        host time the engine thread spent in the step's sync points (blocked on the GPU)
--   kind        'prefill' when the summed time of the step's ops, or the number of calls that launched them,
--               exceeds $prefill_ratio x the run's median step (a prefill runs every prompt token, a decode
--               step one per sequence; an eager prefill beside graph-replayed decode steps launches its
--               kernels one by one; and the median step of a generation run is a decode step), or when its
--               largest graph replay is of a graph the run replays in fewer than 1 / (2 x $prefill_ratio) as
--               many steps as its most used one (a prefill captured as a graph of its own, which may cost
--               and launch what a decode step does; a graph is named by its nodes' ids); else 'decode'.
--               batch_size and depth are unknown (NULL).
WITH ops AS (
    SELECT step, start, "end", correlation_id, graph_node FROM gpu_ops WHERE run_id = $run_id AND step IS NOT NULL
),
step_ops AS (
    SELECT step, min(start) AS gpu_start_ns, max("end") AS gpu_end_ns, sum("end" - start) AS op_ns,
           count(DISTINCT correlation_id) AS launches
    FROM ops GROUP BY step
),
replays AS (  -- each graph replay: its graph (the lowest node id names it) and how many nodes it ran
    SELECT step, min(graph_node) AS graph, count(*) AS nodes
    FROM ops WHERE graph_node IS NOT NULL GROUP BY step, correlation_id
),
step_graphs AS (  -- the graph of each step's largest replay (of equals, the lowest id)
    SELECT step, min(graph) FILTER (nodes = largest) AS graph
    FROM (SELECT *, max(nodes) OVER (PARTITION BY step) AS largest FROM replays)
    GROUP BY step
),
rare_graphs AS (
    SELECT step
    FROM (SELECT step, count(*) OVER (PARTITION BY graph) AS uses FROM step_graphs)
    WHERE uses * 2 * $prefill_ratio < (SELECT max(uses) FROM (SELECT count(*) AS uses FROM step_graphs GROUP BY graph))
),
periods AS (
    SELECT *, lead(gpu_start_ns) OVER (ORDER BY step) AS next_start_ns,
           op_ns > $prefill_ratio * median(op_ns) OVER ()
             OR launches > $prefill_ratio * median(launches) OVER ()
             OR step IN (FROM rare_graphs) AS prefill_like
    FROM step_ops
),
busy AS (
    SELECT start, "end", busy_before FROM gpu_busy WHERE run_id = $run_id
),
busy_at AS (  -- B(t) at both edges of each period
    SELECT p.step,
           b.busy_before + least(p.gpu_start_ns, b."end") - b.start AS before_start,
           n.busy_before + least(p.next_start_ns, n."end") - n.start AS before_next
    FROM periods p
    ASOF LEFT JOIN busy b ON p.gpu_start_ns >= b.start
    ASOF LEFT JOIN busy n ON p.next_start_ns >= n.start
),
gaps AS (  -- the idle between consecutive busy islands
    SELECT "end" AS start, lead(start) OVER (ORDER BY start) AS "end" FROM busy
),
gaps_in_steps AS (
    SELECT p.step, g."end" - g.start AS idle_ns
    FROM gaps g ASOF JOIN (FROM periods WHERE next_start_ns > gpu_start_ns) p ON g.start >= p.gpu_start_ns
    WHERE g."end" <= p.next_start_ns
),
idle AS (
    SELECT step,
           COALESCE(sum(idle_ns) FILTER (idle_ns < $gap_ns), 0) AS kernel_gap_ns,
           COALESCE(sum(idle_ns) FILTER (idle_ns >= $gap_ns), 0) AS bubble_ns
    FROM gaps_in_steps GROUP BY step
),
waits AS (
    SELECT step, sum("end" - start) AS wait_ns FROM sync_points WHERE run_id = $run_id GROUP BY step
)
SELECT $run_id AS run_id,
       p.step,
       CASE WHEN p.prefill_like THEN 'prefill' ELSE 'decode' END AS kind,
       NULL::INTEGER AS depth,
       NULL::INTEGER AS batch_size,
       CASE WHEN p.next_start_ns IS NULL THEN p.gpu_end_ns - p.gpu_start_ns
            ELSE p.next_start_ns - p.gpu_start_ns - COALESCE(i.bubble_ns, 0) END / 1e6 AS forward_ms,
       NULL::DOUBLE AS sampling_ms,
       (a.before_next - a.before_start) / 1e6 AS busy_ms,
       CASE WHEN p.next_start_ns IS NOT NULL THEN COALESCE(i.bubble_ns, 0) / 1e6 END AS bubble_ms,
       CASE WHEN p.next_start_ns IS NOT NULL THEN COALESCE(i.kernel_gap_ns, 0) / 1e6 END AS kernel_gap_ms,
       (p.next_start_ns - p.gpu_start_ns) / 1e6 AS period_ms,
       0.0 AS plan_ms, 0.0 AS launch_ms, 0.0 AS commit_ms, 0.0 AS finalize_ms,
       COALESCE(w.wait_ns, 0) / 1e6 AS wait_ms,
       p.gpu_start_ns,
       p.gpu_end_ns
FROM periods p
LEFT JOIN busy_at a USING (step)
LEFT JOIN idle i USING (step)
LEFT JOIN waits w USING (step)
ORDER BY p.step
