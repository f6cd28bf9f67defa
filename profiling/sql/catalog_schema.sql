-- The catalog: one row per run in `runs`, and per run the few trace facts the analysis reads.
-- Times are integer nanoseconds on the trace's own clock (nsys session time, or perf_counter_ns for
-- in-process timelines); `tid`/`pid` are nsys globalTid/globalPid (0 for timelines).

-- Which layout of these tables the catalog holds (profiling.catalog.CATALOG_VERSION).
CREATE TABLE IF NOT EXISTS catalog_info (version INTEGER NOT NULL);

CREATE TABLE IF NOT EXISTS runs (
    run_id             VARCHAR PRIMARY KEY,
    content_hash       VARCHAR NOT NULL UNIQUE,   -- sha256 of the trace: re-ingesting is a no-op
    model              VARCHAR,
    preset             VARCHAR,
    depth              INTEGER,
    streams            INTEGER,
    output_len_mean    DOUBLE,
    mean_generated_len DOUBLE,                    -- measured L
    requests           INTEGER,
    device             VARCHAR,                   -- GPU name or 'cpu'
    driver             VARCHAR,
    torch              VARCHAR,
    nsys_version       VARCHAR,
    schema_version     VARCHAR,
    command            VARCHAR,
    started_at         TIMESTAMP,
    wall_s             DOUBLE,
    generated_tokens   BIGINT,
    decode_steps       INTEGER,
    source             VARCHAR NOT NULL,          -- 'nsys' | 'timeline'
    trace_path         VARCHAR,
    tensor_parallel    INTEGER,                   -- ranks of the engine (1: one GPU)
    rank               INTEGER                    -- whose timeline this run is; NULL: all ranks
);

-- META_DATA_EXPORT and TARGET_INFO_* facts, kept as name/value pairs.
CREATE TABLE IF NOT EXISTS trace_meta (run_id VARCHAR, name VARCHAR, value VARCHAR);

-- Host ranges of our NVTX domain; `step` is the range's payload.
CREATE TABLE IF NOT EXISTS host_ranges (
    run_id VARCHAR, range_id BIGINT, tid BIGINT, start BIGINT, "end" BIGINT, name VARCHAR, step BIGINT);

-- Time segments of a host thread labelled with the innermost range open there (derived at ingest).
CREATE TABLE IF NOT EXISTS host_segments (
    run_id VARCHAR, tid BIGINT, start BIGINT, "end" BIGINT, phase VARCHAR, step BIGINT);

-- From the `step_meta` marks: what each step was.
CREATE TABLE IF NOT EXISTS step_info (
    run_id VARCHAR, step BIGINT, kind VARCHAR, batch_size INTEGER, tokens INTEGER, depth INTEGER);

-- CUDA runtime/driver API calls, each with the innermost host range it ran in.
CREATE TABLE IF NOT EXISTS api_calls (
    run_id VARCHAR, tid BIGINT, pid BIGINT, start BIGINT, "end" BIGINT, correlation_id BIGINT,
    name VARCHAR, phase VARCHAR, step BIGINT);

-- Kernels, memcpys and memsets (op = 'kernel' | 'memcpy' | 'memset'; 'graph' for a CUDA-graph replay traced
-- whole, its kernels unseen; 'device' for timeline intervals), with the host time and thread of the CUDA call
-- that launched them and that call's step and phase; graph_node is set for the nodes of a CUDA graph replay
-- (traced with --cuda-graph-trace=node) and, on a 'graph' op, holds the graph's id.
CREATE TABLE IF NOT EXISTS gpu_ops (
    run_id VARCHAR, op VARCHAR, start BIGINT, "end" BIGINT, stream_id BIGINT, pid BIGINT,
    correlation_id BIGINT, name VARCHAR, bytes BIGINT, copy_kind INTEGER, src_kind INTEGER,
    dst_kind INTEGER, launched_at BIGINT, phase VARCHAR, step BIGINT, tid BIGINT, graph_node BIGINT);

-- CUPTI synchronization records (host blocked until the GPU reached a point).
CREATE TABLE IF NOT EXISTS syncs (
    run_id VARCHAR, start BIGINT, "end" BIGINT, pid BIGINT, correlation_id BIGINT, sync_type INTEGER,
    stream_id BIGINT);

-- The per-step table of docs/phases.md (profiling/sql/per_step.sql), stored at ingest for every run.
CREATE TABLE IF NOT EXISTS steps (
    run_id VARCHAR, step BIGINT, kind VARCHAR, depth INTEGER, batch_size INTEGER,
    forward_ms DOUBLE, sampling_ms DOUBLE, busy_ms DOUBLE, bubble_ms DOUBLE, kernel_gap_ms DOUBLE, period_ms DOUBLE,
    plan_ms DOUBLE, launch_ms DOUBLE, commit_ms DOUBLE, finalize_ms DOUBLE, wait_ms DOUBLE,
    gpu_start_ns BIGINT, gpu_end_ns BIGINT);

-- Each step's forward and sampling spans on the GPU, with the busy time (union of the ops) inside each
-- (profiling/sql/step_spans.sql, derived at ingest); part = 'forward' | 'sampling'.
CREATE TABLE IF NOT EXISTS step_spans (
    run_id VARCHAR, step BIGINT, part VARCHAR, start BIGINT, "end" BIGINT, busy_ns BIGINT);

-- The GPU's busy islands (union of all GPU ops) with the busy time before each (derived at ingest).
CREATE TABLE IF NOT EXISTS gpu_busy (run_id VARCHAR, start BIGINT, "end" BIGINT, busy_before BIGINT);

-- How the run's steps were found (profiling/steps.py): rule 'bubblelab' (our NVTX ranges), 'nvtx' (a range
-- the user named, detail = the regex), 'graph' (one CUDA-graph launch per step) or 'sync' (the host sync
-- that closes each step); the process and GPU the run covers; the engine thread; the kernel-gap threshold
-- (idle shorter than it is a gap between kernels, longer is bubble; foreign runs only).
CREATE TABLE IF NOT EXISTS step_rules (
    run_id VARCHAR, rule VARCHAR, detail VARCHAR, pid BIGINT, device INTEGER, engine_tid BIGINT,
    gap_threshold_ns BIGINT);

-- Host window of each step of a foreign run: CUDA calls starting in [host_start, host_end) belong to it.
CREATE TABLE IF NOT EXISTS step_windows (run_id VARCHAR, step BIGINT, host_start BIGINT, host_end BIGINT);

-- Every rule profiling/steps.py tried on a foreign run, with the evidence for its steps (profiling/evidence.py):
-- how many, their median host window, how irregular (robust CV of the windows' lengths), the share of the
-- GPU's time inside them, the share closed by a device-to-host read (the sampled tokens coming back), the
-- share launching the same work, and whether it was the rule used.
CREATE TABLE IF NOT EXISTS step_candidates (
    run_id VARCHAR, rule VARCHAR, detail VARCHAR, steps INTEGER, window_ms DOUBLE, spread DOUBLE,
    coverage DOUBLE, read_share DOUBLE, repeat_share DOUBLE, chosen BOOLEAN);

-- What the value checks at ingest found (sql/check_values.sql): rows of a kind ('GPU ops', 'CUDA API calls',
-- ...) with a problem, how many of how many, and what was done ('dropped' or 'counted').
CREATE TABLE IF NOT EXISTS trace_checks (
    run_id VARCHAR, what VARCHAR, problem VARCHAR, count BIGINT, total BIGINT, action VARCHAR);

-- OS runtime calls (nsys -t osrt), for what the host was doing while the GPU idled.
CREATE TABLE IF NOT EXISTS os_calls (
    run_id VARCHAR, tid BIGINT, start BIGINT, "end" BIGINT, name VARCHAR, nesting INTEGER);

-- Host synchronisation points of the engine thread (sql/sync_points.sql): blocking calls and device-to-host
-- copies with no other launch between them, how many DtoH copies they launched, the launch that followed, and
-- the step they fall in.
CREATE TABLE IF NOT EXISTS sync_points (
    run_id VARCHAR, point BIGINT, start BIGINT, "end" BIGINT, calls INTEGER, reads INTEGER,
    next_launch BIGINT, step BIGINT);

-- Every GPU idle gap inside a foreign run's step periods, with when the op ending it was launched
-- (foreign_gaps.sql, derived at ingest).
CREATE TABLE IF NOT EXISTS idle_gaps (
    run_id VARCHAR, step BIGINT, start BIGINT, "end" BIGINT, launched_at BIGINT);

-- A foreign run's host syncs (foreign_sync_inventory.sql, derived at ingest): blocking calls and DtoH or
-- pageable copies, whether the engine thread made them, the step, and which close their step.
CREATE TABLE IF NOT EXISTS host_syncs (
    run_id VARCHAR, event VARCHAR, api VARCHAR, detail VARCHAR, engine BOOLEAN, step BIGINT,
    start_ns BIGINT, host_us DOUBLE, flagged BOOLEAN, reason VARCHAR, bytes BIGINT, closing BOOLEAN,
    after VARCHAR);

-- What a foreign run's engine thread was doing during its bubble gaps and at its host syncs (host_activity.sql
-- over activity_intervals.sql, derived at ingest): the CUDA call, OS runtime call and innermost NVTX range
-- open, and the label they give (CUDA call first, then OS call, then range).
CREATE TABLE IF NOT EXISTS host_activity (
    run_id VARCHAR, start BIGINT, "end" BIGINT, cuda VARCHAR, os VARCHAR, nvtx VARCHAR, label VARCHAR);
