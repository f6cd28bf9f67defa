-- How long the GPU idles between two launches, by the kind of op on either side, and whether the host was
-- late or the second launch was already queued: the idle gaps (idle_gaps table, foreign_gaps.sql) of the
-- given steps of a foreign run (relation `per_step`) that end one launch's work and begin another's, and
-- every bubble gap.
--   kind_before, kind_after  'graph' (a CUDA-graph replay: its nodes, or the replay traced whole), 'kernel',
--                            'memcpy' or 'memset': of the op ending at the gap's start and of the op starting
--                            at its end (of several at one instant: the latest launched before, the earliest
--                            launched after, ties to the higher / lower correlation id; ops no call launched
--                            are not read)
--   queued                   the op after the gap had been launched before the gap began, so the idle was
--                            the GPU's own hand-over; FALSE where the host launched it late; NULL where no
--                            launching call was found
--   bubble                   at least $gap_ns long (a kernel gap otherwise)
--   between_launches         the ops on either side came from two launching calls (FALSE between the nodes
--                            of one graph replay: no launch hands over there; such gaps come only as bubble)
-- costmodel.foreign_handover prices what each late launch costs once queued, from the queued ones.
WITH ops AS (  -- ops a call launched; `launch` orders them by launch, ties by correlation id (32-bit);
              -- `kind` an ENUM of gpu_ops' op kinds (pandas gets a category: a million strings cost more)
    SELECT start, "end", pid, correlation_id,
           launched_at::HUGEINT * 4294967296 + correlation_id AS launch,
           CASE WHEN op = 'graph' OR graph_node IS NOT NULL THEN 'graph' ELSE op END
             ::ENUM('graph', 'kernel', 'memcpy', 'memset', 'device') AS kind
    FROM gpu_ops WHERE run_id = $run_id AND launched_at IS NOT NULL
),
before AS (  -- the last launched of the ops ending at an instant
    SELECT "end" AS at, arg_max(kind, launch) AS kind, arg_max(pid, launch) AS pid,
           arg_max(correlation_id, launch) AS correlation_id
    FROM ops GROUP BY "end"
),
after AS (  -- the first launched of the ops starting at an instant
    SELECT start AS at, arg_min(kind, launch) AS kind, arg_min(pid, launch) AS pid,
           arg_min(correlation_id, launch) AS correlation_id
    FROM ops GROUP BY start
),
gaps AS (
    SELECT g.step, g.start, g."end", g.launched_at
    FROM idle_gaps g SEMI JOIN (SELECT step FROM per_step WHERE run_id = $run_id) s USING (step)
    WHERE g.run_id = $run_id
)
SELECT * FROM (
    SELECT g.step, (g."end" - g.start) / 1e3 AS idle_us, b.kind AS kind_before, a.kind AS kind_after,
           g.launched_at < g.start AS queued, g."end" - g.start >= $gap_ns AS bubble,
           b.pid IS DISTINCT FROM a.pid
             OR b.correlation_id IS DISTINCT FROM a.correlation_id AS between_launches,
           g.start
    FROM gaps g
    LEFT JOIN before b ON b.at = g.start
    LEFT JOIN after a ON a.at = g."end"
)
WHERE bubble OR between_launches
ORDER BY start
