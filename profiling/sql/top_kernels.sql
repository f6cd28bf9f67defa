-- Which kernels take the GPU's time? Per kernel (by its full name, as `nsys stats cuda_gpu_kern_sum` and HTA
-- group them): launches, total, mean, p50/p90/p99 and max (us), and the share of the GPU's busy time (the union
-- of every kernel, copy and memset: table gpu_busy); kernels on concurrent streams can sum past 100%.
-- The $top largest by total time are listed, the rest summed as one row (`kernel` = 'other N kernels', no
-- percentiles). A CUDA-graph replay traced whole (ingest_graphs.sql) is a row of its own: 'CUDA graph N [whole
-- replay]'. `kernel` is the name shortened for display: no return type, template arguments, parameter list
-- or namespace.
WITH per_kernel AS (
    SELECT name, count(*) AS calls, sum("end" - start) AS total_ns,
           quantile_cont("end" - start, 0.5) AS p50_ns,
           quantile_cont("end" - start, 0.9) AS p90_ns,
           quantile_cont("end" - start, 0.99) AS p99_ns,
           max("end" - start) AS max_ns
    FROM gpu_ops
    WHERE run_id = $run_id AND op IN ('kernel', 'graph')
    GROUP BY name
),
ranked AS (
    SELECT *, row_number() OVER (ORDER BY total_ns DESC, name) AS rank FROM per_kernel
),
busy AS (
    SELECT sum("end" - start) AS busy_ns FROM gpu_busy WHERE run_id = $run_id
),
rows AS (
    SELECT rank, name, calls, total_ns, p50_ns, p90_ns, p99_ns, max_ns FROM ranked WHERE rank <= $top
    UNION ALL
    SELECT $top::BIGINT + 1, NULL, sum(calls)::BIGINT, sum(total_ns)::BIGINT, NULL, NULL, NULL, max(max_ns)
    FROM ranked WHERE rank > $top HAVING count(*) > 0
),
shortened AS (
    SELECT *,
           -- 'void ns::kern<4, F>(T*, int)' -> 'kern': cut at the first '<' or '(', drop the return type and
           -- the namespace
           regexp_replace(regexp_extract(regexp_replace(name, '^\s*(void\s+)?', ''), '^[^<(]*'),
                          '^.*::', '') AS bare
    FROM rows
)
SELECT rank,
       CASE WHEN name IS NULL THEN 'other ' || (SELECT count(*) - $top FROM per_kernel) || ' kernels'
            WHEN trim(bare) = '' THEN left(name, 60)
            ELSE left(trim(bare), 60) END AS kernel,
       name, calls,
       total_ns / 1e6 AS total_ms,
       total_ns / calls / 1e3 AS mean_us,
       p50_ns / 1e3 AS p50_us, p90_ns / 1e3 AS p90_us, p99_ns / 1e3 AS p99_us, max_ns / 1e3 AS max_us,
       total_ns / nullif(busy_ns, 0) AS busy_share
FROM shortened, busy
ORDER BY rank
