-- How long are the GPU's idle gaps? Counts and total idle per length bucket (relation `idle_gaps`), and how
-- many of them are launch gaps inside a forward or sampling span (kernel_gaps) rather than bubble.
-- Back-to-back kernels on an H200 still leave ~0.5-2.5 us gaps: the first buckets are the launch floor.
WITH buckets(lo_us, hi_us) AS (
    VALUES (0, 2), (2, 5), (5, 10), (10, 20), (20, 50), (50, 100), (100, 200), (200, 500), (500, 1000),
           (1000, 10000), (10000, NULL)
),
binned AS (  -- each gap falls in the bucket with the largest lower edge not above it
    SELECT b.lo_us, g.idle_us, g.within FROM idle_gaps g ASOF JOIN buckets b ON g.idle_us >= b.lo_us
)
SELECT lo_us, hi_us,
       count(idle_us) AS gaps,
       COALESCE(sum(idle_us), 0) / 1e3 AS idle_ms,
       count(idle_us) FILTER (within IS NOT NULL) AS kernel_gaps
FROM buckets LEFT JOIN binned USING (lo_us)
GROUP BY ALL
ORDER BY lo_us
