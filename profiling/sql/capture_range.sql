-- What stretch of time did the capture cover? Where the trace's CUDA API calls (input `starts`: their start
-- times, every process) lie, robustly: from their 5th to their 95th percentile, widened on each side by
-- twice that span and by at least a second. A trace's own first and last events fall inside however
-- unevenly its calls spread; a timestamp shifted by years, or by a clock jump of seconds, falls outside
-- (check_values.sql drops it). The range moves with the timestamps, so shifting every one of them by the
-- same amount changes nothing.
WITH q AS (
    SELECT quantile_cont(start::DOUBLE, 0.05) AS p5, quantile_cont(start::DOUBLE, 0.95) AS p95 FROM starts
)
SELECT p5 - greatest(2 * (p95 - p5), 1e9) AS lo, p95 + greatest(2 * (p95 - p5), 1e9) AS hi FROM q
