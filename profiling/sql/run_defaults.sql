-- Fill the run's depth and decode step count from its step_meta marks when the caller did not give them.
UPDATE runs SET
    depth = COALESCE(depth, (SELECT max(depth) FROM step_info WHERE run_id = $run_id)),
    decode_steps = COALESCE(decode_steps,
                            (SELECT count(*) FROM step_info WHERE run_id = $run_id AND kind = 'decode'))
WHERE run_id = $run_id
