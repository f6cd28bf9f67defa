-- An in-process Timeline (relations tl_host, tl_steps, tl_device, already tagged with run_id) into the
-- tables an nsys run fills; its device intervals are the GPU ops, already attributed to step and phase.
INSERT INTO host_ranges SELECT run_id, range_id, tid, start_ns, end_ns, phase, step FROM tl_host;
INSERT INTO step_info SELECT run_id, step, kind, batch_size, tokens, depth FROM tl_steps;
INSERT INTO gpu_ops (run_id, op, start, "end", name, phase, step)
SELECT run_id, 'device', start_ns, end_ns, phase, phase, step FROM tl_device;
