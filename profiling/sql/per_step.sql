-- Per-step table of one run (docs/phases.md "The per-step table"): where each step's GPU time went.
--   gpu_start  first forward op of the step on the GPU (any op of the step if it launched no forward)
--   period     gpu_start of the next step minus this one's (NULL for the last step)
--   forward    union of the GPU intervals of ops launched under `forward`/`prefill` ranges of the step
--   sampling   same for ops launched under `sampling`/`mask`/`copy_d2h`
--   busy       union of ALL GPU activity (any step, stream or kind) inside the step's period
--   bubble     period - busy: the GPU idle inside the period
-- Unions use the sweep "each interval adds what lies past the running max end of the earlier ones";
-- busy uses B(t), the GPU busy time before t (gpu_busy.sql): busy = B(next start) - B(start).
WITH ops AS (
    SELECT start, "end", step, phase FROM gpu_ops WHERE run_id = $run_id
),
busy AS (
    SELECT start, "end", busy_before FROM gpu_busy WHERE run_id = $run_id
),
step_ops AS (
    SELECT step, start, "end",
           CASE WHEN phase IN ('forward', 'prefill') THEN 'forward'
                WHEN phase IN ('sampling', 'mask', 'copy_d2h') THEN 'sampling' END AS part
    FROM ops WHERE step IS NOT NULL
),
part_union AS (  -- union length of each step's forward ops and of its sampling ops
    SELECT step, part,
           sum(greatest(0, "end" - greatest(start, COALESCE(covered, start)))) AS busy_ns
    FROM (SELECT step, part, start, "end",
                 max("end") OVER (PARTITION BY step, part ORDER BY start, "end"
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered
          FROM step_ops WHERE part IS NOT NULL)
    GROUP BY step, part
),
step_span AS (
    SELECT step,
           COALESCE(min(start) FILTER (part = 'forward'), min(start)) AS gpu_start_ns,
           max("end") AS gpu_end_ns
    FROM step_ops GROUP BY step
),
periods AS (
    SELECT step, gpu_start_ns, gpu_end_ns,
           lead(gpu_start_ns) OVER (ORDER BY step) AS next_start_ns
    FROM step_span
),
busy_at AS (  -- B(t) at both edges of each period
    SELECT p.step,
           b.busy_before + least(p.gpu_start_ns, b."end") - b.start AS before_start,
           n.busy_before + least(p.next_start_ns, n."end") - n.start AS before_next
    FROM periods p
    ASOF LEFT JOIN busy b ON p.gpu_start_ns >= b.start
    ASOF LEFT JOIN busy n ON p.next_start_ns >= n.start
),
host AS (  -- CPU time of the top-level phases (and the intended wait), per step
    SELECT step,
           sum("end" - start) FILTER (name = 'plan') AS plan_ns,
           sum("end" - start) FILTER (name = 'launch') AS launch_ns,
           sum("end" - start) FILTER (name = 'commit') AS commit_ns,
           sum("end" - start) FILTER (name = 'finalize') AS finalize_ns,
           sum("end" - start) FILTER (name = 'wait') AS wait_ns
    FROM host_ranges WHERE run_id = $run_id AND step IS NOT NULL
    GROUP BY step
),
steps AS (
    SELECT step FROM host UNION SELECT step FROM step_span
)
SELECT $run_id AS run_id,
       s.step,
       i.kind,
       COALESCE(i.depth, r.depth) AS depth,
       i.batch_size,
       COALESCE(f.busy_ns, 0) / 1e6 AS forward_ms,
       COALESCE(g.busy_ns, 0) / 1e6 AS sampling_ms,
       (a.before_next - a.before_start) / 1e6 AS busy_ms,
       (p.next_start_ns - p.gpu_start_ns - (a.before_next - a.before_start)) / 1e6 AS bubble_ms,
       (p.next_start_ns - p.gpu_start_ns) / 1e6 AS period_ms,
       COALESCE(h.plan_ns, 0) / 1e6 AS plan_ms,
       COALESCE(h.launch_ns, 0) / 1e6 AS launch_ms,
       COALESCE(h.commit_ns, 0) / 1e6 AS commit_ms,
       COALESCE(h.finalize_ns, 0) / 1e6 AS finalize_ms,
       COALESCE(h.wait_ns, 0) / 1e6 AS wait_ms,
       p.gpu_start_ns,
       p.gpu_end_ns
FROM steps s
JOIN runs r ON r.run_id = $run_id
LEFT JOIN step_info i ON i.run_id = $run_id AND i.step = s.step
LEFT JOIN part_union f ON f.step = s.step AND f.part = 'forward'
LEFT JOIN part_union g ON g.step = s.step AND g.part = 'sampling'
LEFT JOIN periods p ON p.step = s.step
LEFT JOIN busy_at a ON a.step = s.step
LEFT JOIN host h ON h.step = s.step
ORDER BY s.step
