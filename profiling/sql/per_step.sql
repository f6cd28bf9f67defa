-- Per-step table of one run (docs/phases.md "The per-step table"): where each step's GPU time went.
--   gpu_start   first forward op of the step on the GPU (any op of the step if it launched no forward)
--   period      gpu_start of the next step minus this one's (NULL for the last step)
--   forward     SPAN of the step's forward ops, sampling: SPAN of its compute-stream sampling ops
--               (step_spans.sql): what CUDA events around them measure, launch gaps between kernels included
--   bubble      the period's time outside both spans: the compute stream idle because the host had not yet
--               given it work. The engine enqueues forward then sampling on one stream, so the spans are
--               disjoint and inside the period and bubble = period - forward - sampling.
--   kernel_gap  idle inside the spans: (span - union of its ops) summed over both parts, the launch gaps
--               between back-to-back kernels (the GPU-side floor; 0 for timelines, which record spans only)
--   busy        union of ALL GPU activity (any step, stream or kind) inside the period; busy/period = GPU busy
-- Identity (spans disjoint and inside the period):
--   period - busy = bubble + kernel_gap - other
-- where other = busy time in the period outside this step's forward/sampling ops (the metadata HtoD copy,
-- the copy stream's DtoH copies, the mask upload), none of which the bubble or the spans separate out.
-- busy uses B(t), the GPU busy time before t (gpu_busy.sql): busy = B(next start) - B(start).
WITH ops AS (
    SELECT step, start, "end", phase FROM gpu_ops WHERE run_id = $run_id AND step IS NOT NULL
),
spans AS (
    SELECT step,
           min(start) FILTER (part = 'forward') AS f0, max("end") FILTER (part = 'forward') AS f1,
           min(start) FILTER (part = 'sampling') AS s0, max("end") FILTER (part = 'sampling') AS s1,
           sum("end" - start - busy_ns) AS kernel_gap_ns
    FROM step_spans WHERE run_id = $run_id
    GROUP BY step
),
busy AS (
    SELECT start, "end", busy_before FROM gpu_busy WHERE run_id = $run_id
),
step_ops AS (
    SELECT step, min(start) AS first_ns, max("end") AS gpu_end_ns FROM ops GROUP BY step
),
periods AS (
    SELECT o.step, COALESCE(s.f0, o.first_ns) AS gpu_start_ns, o.gpu_end_ns,
           lead(COALESCE(s.f0, o.first_ns)) OVER (ORDER BY o.step) AS next_start_ns
    FROM step_ops o LEFT JOIN spans s USING (step)
),
clipped AS (  -- each span clipped to the period; a missing span is the empty interval at the period start
    SELECT p.step, p.gpu_start_ns AS p0, p.next_start_ns AS p1,
           COALESCE(s.f0, p.gpu_start_ns) AS f0, COALESCE(s.f1, p.gpu_start_ns) AS f1,
           COALESCE(s.s0, p.gpu_start_ns) AS s0, COALESCE(s.s1, p.gpu_start_ns) AS s1
    FROM periods p LEFT JOIN spans s USING (step)
),
covered AS (  -- |(forward span U sampling span) within the period|
    SELECT step,
           greatest(0, least(f1, p1) - greatest(f0, p0)) + greatest(0, least(s1, p1) - greatest(s0, p0))
             - greatest(0, least(f1, s1, p1) - greatest(f0, s0, p0)) AS spans_ns
    FROM clipped
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
    SELECT step FROM host UNION SELECT step FROM step_ops
)
SELECT $run_id AS run_id,
       s.step,
       i.kind,
       COALESCE(i.depth, r.depth) AS depth,
       i.batch_size,
       COALESCE(x.f1 - x.f0, 0) / 1e6 AS forward_ms,
       COALESCE(x.s1 - x.s0, 0) / 1e6 AS sampling_ms,
       (a.before_next - a.before_start) / 1e6 AS busy_ms,
       (p.next_start_ns - p.gpu_start_ns - c.spans_ns) / 1e6 AS bubble_ms,
       COALESCE(x.kernel_gap_ns, 0) / 1e6 AS kernel_gap_ms,
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
LEFT JOIN spans x ON x.step = s.step
LEFT JOIN periods p ON p.step = s.step
LEFT JOIN covered c ON c.step = s.step
LEFT JOIN busy_at a ON a.step = s.step
LEFT JOIN host h ON h.step = s.step
ORDER BY s.step
