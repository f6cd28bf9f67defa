-- $copies copies of an event table with times only (OS runtime calls), each $span ns after the previous one.
CREATE TABLE dst."{table}" AS
SELECT * REPLACE (start + i * $span AS start, "end" + i * $span AS "end")
FROM src."{table}", range($copies) r(i)
ORDER BY start
