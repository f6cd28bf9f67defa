-- Which CUDA API calls take the host's time? Per call name (as `nsys stats cuda_api_sum`): calls, total, mean,
-- p50/p99 and max (us), and the share of all CUDA API time, largest total first. Blocking calls (synchronize,
-- copies to pageable memory) show here as long means; launches as many short ones.
WITH per_call AS (
    SELECT name, count(*) AS calls, sum("end" - start) AS total_ns,
           quantile_cont("end" - start, 0.5) AS p50_ns,
           quantile_cont("end" - start, 0.99) AS p99_ns,
           max("end" - start) AS max_ns
    FROM api_calls
    WHERE run_id = $run_id
    GROUP BY name
)
SELECT name, calls,
       total_ns / 1e6 AS total_ms,
       total_ns / calls / 1e3 AS mean_us,
       p50_ns / 1e3 AS p50_us, p99_ns / 1e3 AS p99_us, max_ns / 1e3 AS max_us,
       total_ns / nullif(sum(total_ns) OVER (), 0) AS share
FROM per_call
ORDER BY total_ns DESC, name
