-- Where on the GPU did each step's forward and sampling run? One row per step and part:
--   forward   ops launched under the step's `forward`/`prefill` ranges (any stream)
--   sampling  ops launched under its `sampling` range. The mask upload (`mask` range) and the sampled-ids copy
--             (`copy_d2h`) ride the copy stream, overlapped with other work: neither is sampling time. (Stream
--             ids cannot tell them apart: a graph's kernels may run on the driver's internal streams.)
--   start/end forward: first op start, last op end. Sampling starts when the GPU could start it: at the
--             forward's end, or at the host's launch call if that came later (never after its first op).
--             The GPU-side cost of getting it going (graph launch, the event between the parts) is then
--             sampling's, not bubble: the host is not what the GPU waits for there. The in-process timeline
--             reads sampling the same way (ModelRunner.device_times).
--   busy_ns   union length of the part's ops; span - busy_ns is the launch gaps between (and, for sampling,
--             before) its ops
-- Union: each op adds what lies past the running max end of the ops started before it.
INSERT INTO step_spans
WITH part_ops AS (
    SELECT step, part, start, "end", launched_at,
           max("end") OVER (PARTITION BY step, part ORDER BY start, "end"
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM (SELECT step, start, "end", launched_at,
                 CASE WHEN phase IN ('forward', 'prefill') THEN 'forward'
                      WHEN phase = 'sampling' THEN 'sampling' END AS part
          FROM gpu_ops WHERE run_id = $run_id AND step IS NOT NULL)
    WHERE part IS NOT NULL
),
parts AS (
    SELECT step, part, min(start) AS first_start, max("end") AS last_end,
           min(launched_at) AS launched_at,   -- host time of the part's first launch call
           sum(greatest(0, "end" - greatest(start, COALESCE(reach, start)))) AS busy_ns
    FROM part_ops GROUP BY step, part
)
SELECT $run_id, p.step, p.part,
       CASE WHEN p.part = 'sampling'
            THEN least(p.first_start, greatest(COALESCE(f.last_end, p.first_start),
                                               COALESCE(p.launched_at, p.first_start)))
            ELSE p.first_start END,
       p.last_end, p.busy_ns
FROM parts p
LEFT JOIN parts f ON f.step = p.step AND f.part = 'forward'
