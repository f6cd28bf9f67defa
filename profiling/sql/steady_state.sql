-- Steady-state steps of a per-step table (relation `per_step`, one or more runs).
-- Rule: a step is steady when
--   1. it is a decode step whose next step is a decode step too (its period is decode to decode),
--   2. its batch size is the run's modal decode batch size (ties: the larger), which drops the ramp-up
--      while requests are admitted and the end-of-run ramp-down as they finish (a foreign run's batch
--      size is unknown, NULL, and rule 2 keeps all its decode steps),
--   3. and it is not among the first $warmup steps that pass 1 and 2 (allocator, caches, clocks settle).
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
candidates AS (
    SELECT o.*, row_number() OVER (PARTITION BY o.run_id ORDER BY o.step) AS nth
    FROM ordered o JOIN modal m ON m.run_id = o.run_id AND m.batch_size IS NOT DISTINCT FROM o.batch_size
    WHERE o.kind = 'decode' AND o.next_kind = 'decode' AND o.period_ms IS NOT NULL
)
SELECT * EXCLUDE (next_kind, nth)
FROM candidates
WHERE nth > $warmup
ORDER BY run_id, step
