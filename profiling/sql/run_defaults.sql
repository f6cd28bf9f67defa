-- Fill the run's depth and decode step count when the caller did not give them: from its step_meta marks,
-- or, for a foreign run (no marks), the decode steps its per-step table found.
UPDATE runs SET
    depth = COALESCE(depth, (SELECT max(depth) FROM step_info WHERE run_id = $run_id)),
    decode_steps = COALESCE(decode_steps,
                            NULLIF((SELECT count(*) FROM step_info WHERE run_id = $run_id AND kind = 'decode'), 0),
                            NULLIF((SELECT count(*) FROM steps WHERE run_id = $run_id AND kind = 'decode'), 0))
WHERE run_id = $run_id
