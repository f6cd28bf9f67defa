-- One row per rank and step of tensor-parallel runs (relation `tp_ranks`: run_id, rank, rank_run_id, from
-- tp_groups.sql; relation `comm`: comm_vs_compute.sql over the same runs): each rank's per-step table
-- (docs/phases.md) beside where the step's work lay in time, so the ranks of one step can be put side by side
-- (tp_straggler.sql, tp_skew.sql). All ranks of a run share one clock: nsys's session, or for in-process
-- timelines the host's CLOCK_MONOTONIC. Steps are matched by id (every range's payload, on every rank).
--   forward_start/_end, sampling_start/_end  the step's spans on that rank's GPU (step_spans.sql), ns
--   launch_start/_end, finalize_start/_end   the step's host phases on that rank (first start, last end), ns
--   handoff_ms  rank 0's host time handing the step to the others (`handoff`, inside launch and finalize)
--   recv_ms     a worker's host waiting for rank 0's messages of the step (`recv`: in-process timelines only;
--               under nsys that wait is outside every range)
--   compute_ms, comm_ms, comm_exposed_ms, comm_kernels  comm_vs_compute.sql; NULL where no kernels were recorded
WITH members AS (
    SELECT run_id, rank, rank_run_id FROM tp_ranks
),
spans AS (
    SELECT run_id, step,
           min(start) FILTER (part = 'forward') AS forward_start,
           max("end") FILTER (part = 'forward') AS forward_end,
           min(start) FILTER (part = 'sampling') AS sampling_start,
           max("end") FILTER (part = 'sampling') AS sampling_end
    FROM step_spans
    WHERE run_id IN (SELECT rank_run_id FROM members)
    GROUP BY run_id, step
),
host AS (
    SELECT run_id, step,
           min(start) FILTER (name = 'launch') AS launch_start,
           max("end") FILTER (name = 'launch') AS launch_end,
           min(start) FILTER (name = 'finalize') AS finalize_start,
           max("end") FILTER (name = 'finalize') AS finalize_end,
           sum("end" - start) FILTER (name = 'handoff') AS handoff_ns,
           sum("end" - start) FILTER (name = 'recv') AS recv_ns
    FROM host_ranges
    WHERE run_id IN (SELECT rank_run_id FROM members) AND step IS NOT NULL
    GROUP BY run_id, step
)
SELECT m.run_id, m.rank, m.rank_run_id, s.step, s.kind, s.batch_size,
       s.forward_ms, s.sampling_ms, s.bubble_ms, s.period_ms, s.busy_ms, s.launch_ms, s.finalize_ms,
       h.handoff_ns / 1e6 AS handoff_ms,
       h.recv_ns / 1e6 AS recv_ms,
       c.compute_ms, c.comm_ms, c.comm_exposed_ms, c.comm_kernels,
       x.forward_start, x.forward_end, x.sampling_start, x.sampling_end,
       h.launch_start, h.launch_end, h.finalize_start, h.finalize_end
FROM members m
JOIN steps s ON s.run_id = m.rank_run_id
LEFT JOIN spans x ON x.run_id = m.rank_run_id AND x.step = s.step
LEFT JOIN host h ON h.run_id = m.rank_run_id AND h.step = s.step
LEFT JOIN comm c ON c.run_id = m.rank_run_id AND c.step = s.step
ORDER BY m.run_id, s.step, m.rank
