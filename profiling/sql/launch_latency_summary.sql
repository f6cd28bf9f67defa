-- How long do launches wait for the GPU, per step and overall? Over the rows of launch_latency.sql (input
-- `launches`), the launches and their median, p90 and max latency (us): scope 'run' (the whole run), 'api'
-- (per API call name), 'step' (per step; `step` NULL: the launches outside every step).
WITH scopes AS (
SELECT 'run' AS scope, NULL::VARCHAR AS api, NULL::BIGINT AS step, count(*) AS launches,
       quantile_cont(latency_us, 0.5) AS median_us,
       quantile_cont(latency_us, 0.9) AS p90_us,
       max(latency_us) AS max_us
FROM launches
HAVING count(*) > 0
UNION ALL
SELECT 'api', api, NULL, count(*), quantile_cont(latency_us, 0.5), quantile_cont(latency_us, 0.9),
       max(latency_us)
FROM launches
GROUP BY api
UNION ALL
SELECT 'step', NULL, step, count(*), quantile_cont(latency_us, 0.5), quantile_cont(latency_us, 0.9),
       max(latency_us)
FROM launches
GROUP BY step
)
SELECT * FROM scopes
ORDER BY CASE scope WHEN 'run' THEN 0 WHEN 'api' THEN 1 ELSE 2 END, launches DESC, api, step NULLS LAST
