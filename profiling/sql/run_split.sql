-- Where did the whole capture's time go on the GPU, not only the steady state? The capture's span (first to
-- last GPU op or CUDA API call of the run) split four ways, each in ms and as a share of the span (the shares
-- add up to 1):
--   compute             some kernel running (a timeline's device intervals count as kernels)
--   copies              memcpy or memset running and no kernel
--   idle in steps       nothing running, inside a step's period (the per-step table's steps: first op start to
--                       the next step's, the last to its last op end): the bubbles and launch gaps
--   idle between steps  nothing running, outside every step: before the first, after the last, and any pause
--                       between steps the per-step table leaves out
-- Unions by the sweep of step_spans.sql: each interval adds what lies past the running max end of those
-- started before it. The GPU's busy time inside the steps is B(end) - B(start) over table gpu_busy (as there).
WITH span AS (
    SELECT min(lo) AS lo, max(hi) AS hi
    FROM (SELECT min(start) AS lo, max("end") AS hi FROM gpu_ops WHERE run_id = $run_id
          UNION ALL
          SELECT min(start), max("end") FROM api_calls WHERE run_id = $run_id)
),
compute_ops AS (
    SELECT start, "end",
           max("end") OVER (ORDER BY start, "end" ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM gpu_ops WHERE run_id = $run_id AND op NOT IN ('memcpy', 'memset')
),
compute AS (
    SELECT COALESCE(sum(greatest(0, "end" - greatest(start, COALESCE(reach, start)))), 0) AS ns
    FROM compute_ops
),
busy AS (
    SELECT COALESCE(sum("end" - start), 0) AS ns FROM gpu_busy WHERE run_id = $run_id
),
step_extents AS (
    SELECT gpu_start_ns AS start,
           CASE WHEN period_ms IS NULL THEN gpu_end_ns
                ELSE gpu_start_ns + round(period_ms * 1e6)::BIGINT END AS "end"
    FROM steps WHERE run_id = $run_id AND gpu_start_ns IS NOT NULL
),
marked AS (  -- disjoint step islands (depth 2's steps may overlap at their edges)
    SELECT start, "end",
           COALESCE(start > max("end") OVER (ORDER BY start, "end"
                                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS opens
    FROM step_extents WHERE "end" > start
),
islands AS (
    SELECT min(start) AS start, max("end") AS "end"
    FROM (SELECT start, "end", sum(opens::INTEGER) OVER (ORDER BY start, "end" ROWS UNBOUNDED PRECEDING) AS island
          FROM marked)
    GROUP BY island
),
gpu_islands AS (FROM gpu_busy WHERE run_id = $run_id),
busy_at_start AS (
    SELECT i.start, i."end",
           COALESCE(b.busy_before + least(i.start, b."end") - b.start, 0) AS b0
    FROM islands i ASOF LEFT JOIN gpu_islands b ON i.start >= b.start
),
busy_at_edges AS (
    SELECT s.start, s."end", s.b0,
           COALESCE(b.busy_before + least(s."end", b."end") - b.start, 0) AS b1
    FROM busy_at_start s ASOF LEFT JOIN gpu_islands b ON s."end" >= b.start
),
in_steps AS (
    SELECT COALESCE(sum(("end" - start) - (b1 - b0)), 0) AS idle_ns FROM busy_at_edges
),
parts AS (
    SELECT 1 AS part_order, 'compute' AS part, compute.ns AS ns FROM compute
    UNION ALL SELECT 2, 'copies', busy.ns - compute.ns FROM busy, compute
    UNION ALL SELECT 3, 'idle in steps', idle_ns FROM in_steps
    UNION ALL SELECT 4, 'idle between steps', (span.hi - span.lo) - busy.ns - in_steps.idle_ns
              FROM span, busy, in_steps
)
SELECT part, ns / 1e6 AS ms, ns / nullif((SELECT hi - lo FROM span), 0) AS share
FROM parts
ORDER BY part_order
