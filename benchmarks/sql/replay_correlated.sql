-- $copies copies of an event table whose rows pair by correlation id (CUDA calls, kernels, copies, memsets,
-- sync records), each copy $span ns after the previous one and with its correlation ids $corr higher, so a
-- GPU op still finds the call that launched it and only that one.
CREATE TABLE dst."{table}" AS
SELECT * REPLACE (start + i * $span AS start, "end" + i * $span AS "end",
                  correlationId + i * $corr AS correlationId)
FROM src."{table}", range($copies) r(i)
ORDER BY start
