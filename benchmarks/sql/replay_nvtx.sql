-- $copies copies of the NVTX events, each $span ns after the previous one, with bubblelab's step payloads
-- $steps higher (so the steps stay distinct); a domain is created once (eventType 75), not once per copy.
CREATE TABLE dst."{table}" AS
SELECT * REPLACE (start + i * $span AS start, "end" + i * $span AS "end",
                  int64Value + i * $steps AS int64Value)
FROM src."{table}", range($copies) r(i)
WHERE i = 0 OR eventType <> 75
ORDER BY start
