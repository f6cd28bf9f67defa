-- Steady-state steps of a per-step table (relation `per_step`, one or more runs).
-- Rule: a step is steady when
--   1. it is a decode step whose next step is a decode step too (its period is decode to decode),
--   2. its batch size is the run's modal decode batch size (ties: the larger), which drops the ramp-up
--      while requests are admitted and the end-of-run ramp-down as they finish (a foreign run's batch
--      size is unknown, NULL, and rule 2 keeps all its decode steps),
--   3. for a run of unknown batch size (foreign), its GPU busy time is at least 1/$ratio of the run's median
--      decode step's: rule 2's stand-in, which drops steps that hold next to no GPU work, such as the
--      host-side checks transformers' `generate` reads back before its first forward (4-18 us of kernels
--      against 4 ms a decode step),
--   4. and it is not among the first $warmup steps that pass 1 to 3 (allocator, caches, clocks settle).
WITH ordered AS (
    SELECT *, lead(kind) OVER (PARTITION BY run_id ORDER BY step) AS next_kind
    FROM per_step
),
modal AS (  -- the run's most common decode batch size, the larger on a tie
    SELECT run_id, batch_size
    FROM per_step WHERE kind = 'decode'
    GROUP BY run_id, batch_size
    QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY count(*) DESC, batch_size DESC) = 1
),
typical AS (  -- the run's median decode step's GPU busy time
    SELECT run_id, median(busy_ms) AS busy_ms FROM per_step WHERE kind = 'decode' GROUP BY run_id
),
candidates AS (
    SELECT o.*, row_number() OVER (PARTITION BY o.run_id ORDER BY o.step) AS nth
    FROM ordered o
    JOIN modal m ON m.run_id = o.run_id AND m.batch_size IS NOT DISTINCT FROM o.batch_size
    JOIN typical t ON t.run_id = o.run_id
    WHERE o.kind = 'decode' AND o.next_kind = 'decode' AND o.period_ms IS NOT NULL
      AND (o.batch_size IS NOT NULL OR o.busy_ms * $ratio >= t.busy_ms)
)
SELECT * EXCLUDE (next_kind, nth)
FROM candidates
WHERE nth > $warmup
ORDER BY run_id, step
