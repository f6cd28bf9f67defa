-- Another engine split over GPUs (split_engines.sql), its ranks side by side: which of rank 0's steps is each
-- rank's step, and what did that rank's GPU do in it? One row per rank and step in tp_rank_steps.sql's shape,
-- so the straggler, skew and per-rank queries read it as they read ours.
-- Relation `tp_ranks`: run_id (rank 0's run), rank, rank_run_id (each process's run, ranked by its GPU);
-- relation `comm`: comm_vs_compute.sql over the same runs, every kernel of a step (another engine has no phases).
-- Each process's steps were found by the foreign rules and numbered on their own. A rank's step is rank 0's
-- step whose GPU work it overlaps most: the collectives hold the ranks of one step together in time. Two of a
-- rank's steps on one of rank 0's keep the one overlapping most; the GPU span stands for the forward (start,
-- end) and its end for the step's end (no sampling of its own); host phases are unknown (NULL).
WITH rank_steps AS (
    SELECT m.run_id, m.rank, m.rank_run_id, s.step, s.kind, s.batch_size, s.forward_ms, s.sampling_ms,
           s.bubble_ms, s.period_ms, s.busy_ms, s.gpu_start_ns, s.gpu_end_ns
    FROM tp_ranks m
    JOIN steps s ON s.run_id = m.rank_run_id
    WHERE s.gpu_start_ns IS NOT NULL AND s.gpu_end_ns > s.gpu_start_ns
),
leader AS (
    SELECT * FROM rank_steps WHERE rank = 0
),
shared AS (
    SELECT r.rank_run_id, r.step AS own_step, l.step,
           least(r.gpu_end_ns, l.gpu_end_ns) - greatest(r.gpu_start_ns, l.gpu_start_ns) AS overlap_ns
    FROM rank_steps r
    JOIN leader l ON l.run_id = r.run_id
     AND r.gpu_start_ns < l.gpu_end_ns AND l.gpu_start_ns < r.gpu_end_ns
),
best AS (  -- each of a rank's steps on the rank-0 step it overlaps most; one of its steps per rank-0 step
    SELECT rank_run_id, own_step, step
    FROM (
        SELECT rank_run_id, own_step, arg_max(step, overlap_ns) AS step, max(overlap_ns) AS overlap_ns
        FROM shared
        GROUP BY rank_run_id, own_step
    )
    QUALIFY row_number() OVER (PARTITION BY rank_run_id, step ORDER BY overlap_ns DESC, own_step) = 1
)
SELECT r.run_id, r.rank, r.rank_run_id, b.step, l.kind, l.batch_size,
       r.forward_ms, r.sampling_ms, r.bubble_ms, r.period_ms, r.busy_ms,
       NULL::DOUBLE AS launch_ms, NULL::DOUBLE AS finalize_ms,
       NULL::DOUBLE AS handoff_ms, NULL::DOUBLE AS recv_ms,
       c.compute_ms, c.comm_ms, c.comm_exposed_ms, c.comm_kernels,
       r.gpu_start_ns AS forward_start, r.gpu_end_ns AS forward_end,
       NULL::BIGINT AS sampling_start, r.gpu_end_ns AS sampling_end,
       NULL::BIGINT AS launch_start, NULL::BIGINT AS launch_end,
       NULL::BIGINT AS finalize_start, NULL::BIGINT AS finalize_end,
       r.step AS own_step
FROM rank_steps r
JOIN best b ON b.rank_run_id = r.rank_run_id AND b.own_step = r.step
JOIN leader l ON l.run_id = r.run_id AND l.step = b.step
LEFT JOIN comm c ON c.run_id = r.rank_run_id AND c.step = r.step
ORDER BY r.run_id, b.step, r.rank
