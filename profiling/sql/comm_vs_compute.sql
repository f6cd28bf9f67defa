-- How much of each step's GPU time was communication? For every run of relation `tp_ranks` (its rank_run_id)
-- and step: the kernels launched under the step's forward/prefill and sampling ranges, split by name into
-- communication (the collectives: names matching $comm_kernels, e.g. NCCL's ncclDevKernel_AllReduce_Sum_bf16_
-- RING_LL or an older ncclKernel_...) and compute (every other kernel), each class as the union of its
-- kernels' time:
--   compute_ms       busy with compute kernels
--   comm_ms          busy with collectives. A collective's kernel runs from when its rank reaches it until every
--                    rank has: a rank that waits for a slower one waits inside NCCL, so a long comm_ms on one
--                    rank beside a short one on another says which rank was late.
--   comm_exposed_ms  collective time with no compute kernel running beside it: what communication adds to the
--                    step's GPU time (all of comm_ms when the collectives share the compute stream)
--   comm_kernels     how many collective kernels ran
-- $every_phase: every kernel of the step (another engine's trace has no phases).
-- Runs without kernels have no rows: an in-process timeline records each step's spans, not its kernels (and
-- gloo's collectives on the CPU run on the host).
WITH ops AS (
    SELECT run_id, step, start, "end",
           CASE WHEN regexp_matches(name, $comm_kernels) THEN 'comm' ELSE 'compute' END AS class
    FROM gpu_ops
    WHERE run_id IN (SELECT rank_run_id FROM tp_ranks)
      AND op = 'kernel' AND step IS NOT NULL
      AND (phase IN ('forward', 'prefill', 'sampling') OR $every_phase)  -- another engine's: no phases
),
reach AS (  -- union by sweep: a kernel adds what lies past the furthest end of the kernels started before it
    SELECT *,
           max("end") OVER (PARTITION BY run_id, step, class ORDER BY start, "end"
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS class_reach,
           max("end") OVER (PARTITION BY run_id, step ORDER BY start, "end"
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS any_reach
    FROM ops
),
per_step AS (
    SELECT run_id, step,
           sum(greatest(0, "end" - greatest(start, COALESCE(class_reach, start))))
               FILTER (class = 'compute') AS compute_ns,
           sum(greatest(0, "end" - greatest(start, COALESCE(class_reach, start))))
               FILTER (class = 'comm') AS comm_ns,
           sum(greatest(0, "end" - greatest(start, COALESCE(any_reach, start)))) AS busy_ns,
           count(*) FILTER (class = 'comm') AS comm_kernels
    FROM reach
    GROUP BY run_id, step
)
SELECT run_id, step,
       COALESCE(compute_ns, 0) / 1e6 AS compute_ms,
       COALESCE(comm_ns, 0) / 1e6 AS comm_ms,
       (busy_ns - COALESCE(compute_ns, 0)) / 1e6 AS comm_exposed_ms,
       comm_kernels
FROM per_step
ORDER BY run_id, step
