-- How far must each copy of the source shift its ids? The largest correlation id and NVTX step payload, and
-- the kernels of one copy (how many copies make the wanted kernel count).
SELECT (SELECT max(correlationId) FROM src.CUPTI_ACTIVITY_KIND_RUNTIME) AS max_corr,
       (SELECT COALESCE(max(int64Value), 0) FROM src.NVTX_EVENTS) AS max_step,
       (SELECT count(*) FROM src.CUPTI_ACTIVITY_KIND_KERNEL) AS kernels
