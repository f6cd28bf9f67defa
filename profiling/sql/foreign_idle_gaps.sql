-- The idle gaps of a foreign run's steps (relation `gaps`, step_gaps.sql) with, for each bubble gap, what
-- the engine thread was doing when the GPU went idle (host_activity's piece starting with the gap):
-- began_in (the label), and the CUDA call, OS call and NVTX range open then. A kernel gap (within =
-- 'kernel gap') gets none: between back-to-back kernels the host is launching ahead, not waiting, and a
-- million such gaps are not worth a lookup each.
WITH pieces AS (
    SELECT start, cuda, os, nvtx, label FROM host_activity WHERE run_id = $run_id
),
bubbles AS (
    SELECT g.step, g.start_ns, g.end_ns, g.idle_us, g.within, a.label AS began_in, g.launch_lag_us,
           a.cuda AS cuda_call, a.os AS os_call, a.nvtx AS nvtx_range
    FROM (FROM gaps WHERE within IS NULL) g
    LEFT JOIN pieces a ON a.start = g.start_ns
)
SELECT * FROM bubbles
UNION ALL
SELECT step, start_ns, end_ns, idle_us, within, NULL, launch_lag_us, NULL, NULL, NULL
FROM gaps WHERE within IS NOT NULL
ORDER BY start_ns
