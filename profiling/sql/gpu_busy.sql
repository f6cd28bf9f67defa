-- When was the GPU busy? The union of every kernel, copy and memset of the run (any stream) as disjoint
-- islands in time order, each with the busy time before it. Then the busy time before any instant t is one
-- ASOF lookup on the last island starting at or before t:  B(t) = busy_before + least(t, end) - start.
-- Sweep line: an op opens a new island when it starts after everything before it has ended.
INSERT INTO gpu_busy
WITH ops AS (
    SELECT start, "end" FROM gpu_ops WHERE run_id = $run_id
),
marked AS (
    SELECT start, "end",
           COALESCE(start > max("end") OVER (ORDER BY start, "end" ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                    true) AS opens_island
    FROM ops
),
numbered AS (
    SELECT start, "end", sum(opens_island::INTEGER) OVER (ORDER BY start, "end" ROWS UNBOUNDED PRECEDING) AS island
    FROM marked
),
islands AS (
    SELECT min(start) AS start, max("end") AS "end" FROM numbered GROUP BY island
)
SELECT $run_id, start, "end",
       COALESCE(sum("end" - start) OVER (ORDER BY start ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
FROM islands
