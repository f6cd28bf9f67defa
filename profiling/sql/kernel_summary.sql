-- Which kernels (and copies, memsets) take the GPU time of a run, and in which phase were they launched?
SELECT name, op,
       COALESCE(phase, 'outside any phase') AS phase,
       count(*) AS calls,
       sum("end" - start) / 1e6 AS total_ms,
       avg("end" - start) / 1e3 AS mean_us,
       median("end" - start) / 1e3 AS median_us,
       max("end" - start) / 1e3 AS max_us,
       sum("end" - start) / sum(sum("end" - start)) OVER () AS share
FROM gpu_ops
WHERE run_id = $run_id
GROUP BY ALL
ORDER BY total_ms DESC, name
