-- Cut each host thread's time into segments labelled with the innermost range open there
-- (the phase a CUDA call, a sync or a GPU idle gap "happened in").
-- Sweep line, no interval join: walk range starts (+1) and ends (-1) in time order; the running sum is
-- the nesting depth, and the innermost range after any edge is the latest range opened at that depth.
INSERT INTO host_segments
WITH ranges AS (  -- an empty range covers no time, and its end-before-start edges would unbalance the sweep
    SELECT range_id, tid, start, "end", name, step FROM host_ranges WHERE run_id = $run_id AND "end" > start
),
edges AS (
    -- at equal times, ends go before starts, inner ends before outer ends, outer starts before inner ones
    SELECT tid, start AS ts, 1 AS delta, range_id AS opened, 1 AS tie, -"end" AS tie2 FROM ranges
    UNION ALL
    SELECT tid, "end", -1, NULL, 0, -start FROM ranges
),
ordered AS (
    SELECT *, row_number() OVER (PARTITION BY tid ORDER BY ts, tie, tie2) AS seq FROM edges
),
depths AS (
    SELECT *, sum(delta) OVER (PARTITION BY tid ORDER BY seq) AS depth FROM ordered
),
innermost AS (
    SELECT tid, ts,
           lead(ts) OVER (PARTITION BY tid ORDER BY seq) AS next_ts,
           CASE WHEN depth > 0 THEN last_value(opened IGNORE NULLS)
                OVER (PARTITION BY tid, depth ORDER BY seq ROWS UNBOUNDED PRECEDING) END AS range_id
    FROM depths
)
SELECT $run_id, i.tid, i.ts, i.next_ts, r.name, r.step
FROM innermost i
JOIN ranges r USING (range_id)
WHERE i.next_ts > i.ts   -- several edges at one instant: only the last one opens a segment
