-- Where on the GPU did each step's forward and sampling run? One row per step and part:
--   forward   ops launched under the step's `forward`/`prefill` ranges (any stream)
--   sampling  ops launched under its `sampling`/`mask` ranges on the compute stream (the stream most forward
--             ops ran on). The sampled-ids copy of `copy_d2h` runs on the copy stream, overlapped with the next
--             forward, and the mask upload rides the copy stream too: neither is sampling time.
--   start/end the span: first op start, last op end (what CUDA events around the part would measure)
--   busy_ns   union length of the part's ops; span - busy_ns is the launch gaps between its kernels
-- Union: each op adds what lies past the running max end of the ops started before it.
INSERT INTO step_spans
WITH ops AS (
    SELECT step, start, "end", stream_id,
           CASE WHEN phase IN ('forward', 'prefill') THEN 'forward'
                WHEN phase IN ('sampling', 'mask') THEN 'sampling' END AS part
    FROM gpu_ops WHERE run_id = $run_id AND step IS NOT NULL
),
compute_stream AS (  -- NULL for timelines, whose device intervals carry no stream
    SELECT mode(stream_id) AS stream_id FROM ops WHERE part = 'forward'
),
part_ops AS (
    SELECT step, part, start, "end",
           max("end") OVER (PARTITION BY step, part ORDER BY start, "end"
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM ops
    WHERE part = 'forward'
       OR part = 'sampling' AND stream_id IS NOT DISTINCT FROM (SELECT stream_id FROM compute_stream)
)
SELECT $run_id, step, part, min(start), max("end"),
       sum(greatest(0, "end" - greatest(start, COALESCE(reach, start))))
FROM part_ops
GROUP BY step, part
