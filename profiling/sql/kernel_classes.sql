-- Where does each kind of step spend its GPU time, by class of work? One row per step kind and class:
--   gemm        matrix multiplies (cuBLAS / cuBLASLt / nvjet / CUTLASS, and their split-K reductions)
--   attention   attention kernels (flash-attn 2/4, FMHA, the engine's Triton prefill / decode / merge kernels)
--   sampling    everything launched under a `sampling` range (ours); in other engines' traces, which have
--               no such range, kernels named for it (argmax, multinomial, exponential, top-k/p, sample)
--   elementwise norms, activations, RoPE, KV stores, casts, copies done by kernels
--   collective  NCCL and other communication kernels
--   copy        memcpy / memset
--   other       anything else
-- Ops outside any step count under kind 'outside steps'. per_step_ms divides by the steps of that kind.
WITH ops AS (
    SELECT o.op, o.name, o.phase, o."end" - o.start AS ns,
           COALESCE(s.kind, CASE WHEN o.step IS NULL THEN 'outside steps' ELSE 'unknown' END) AS kind
    FROM gpu_ops o
    LEFT JOIN steps s ON s.run_id = o.run_id AND s.step = o.step
    WHERE o.run_id = $run_id
),
classed AS (
    SELECT kind, ns,
           CASE WHEN op <> 'kernel' THEN 'copy'
                WHEN phase = 'sampling' THEN 'sampling'
                WHEN regexp_matches(name, '(?i)nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device')
                    THEN 'collective'
                -- before GEMM: flash-attn-4's CuTe kernels are named kernel_cutlass_..._flash_attn...
                WHEN regexp_matches(name, '(?i)attn|attention|flash|fmha|^_(decode|merge|prefill)_kernel$')
                    THEN 'attention'
                WHEN regexp_matches(name, '(?i)gemm|gemv|nvjet|cutlass|xmma|splitkreduce|cublas|matmul|sm90_')
                    THEN 'gemm'
                -- other engines mark no sampling range: their sampling kernels by name
                WHEN regexp_matches(name, '(?i)argmax|multinomial|exponential|gumbel|top_?k_|top_?p_|sampl')
                    THEN 'sampling'
                WHEN regexp_matches(name, '(?i)triton_|elementwise|norm|rotary|rope|qkv|silu|act_and_mul|copy|cat|index|gather|reduce|softmax|kvcache')
                    THEN 'elementwise'
                ELSE 'other' END AS class
    FROM ops
),
kinds AS (
    SELECT kind, count(*) AS steps FROM steps WHERE run_id = $run_id GROUP BY kind
)
SELECT c.kind, c.class,
       count(*) AS ops,
       sum(c.ns) / 1e6 AS total_ms,
       sum(c.ns) / 1e6 / nullif(k.steps, 0) AS per_step_ms,
       sum(c.ns) / sum(sum(c.ns)) OVER () AS share
FROM classed c
LEFT JOIN kinds k USING (kind)
GROUP BY c.kind, c.class, k.steps
ORDER BY c.kind, total_ms DESC
