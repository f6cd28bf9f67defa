-- How long did the host take to notice that the GPU had finished? Per step whose `wait` really blocked (it
-- began before the step's last GPU op ended): from that op's end (the copy of the sampled ids to the host)
-- to the end of the wait range. Needs GPU ops on the trace's own clock: nsys runs, not timelines (which
-- anchor their device clock on exactly this moment and so cannot see it).
WITH waits AS (
    SELECT step, start AS wait_start, "end" AS wait_end
    FROM host_ranges
    WHERE run_id = $run_id AND name = 'wait'
),
done AS (  -- the end of each step's last GPU op, copies included
    SELECT step, max("end") AS gpu_end
    FROM gpu_ops
    WHERE run_id = $run_id AND step IS NOT NULL
    GROUP BY step
)
SELECT $run_id AS run_id, w.step, (w.wait_end - d.gpu_end) / 1e3 AS wake_us
FROM waits w JOIN done d USING (step)
WHERE w.wait_start < d.gpu_end
ORDER BY w.step
