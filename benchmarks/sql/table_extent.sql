-- When does a source table's first event start and its last one end? (scale_up replays the source's whole
-- span back to back; a range or call with no end counts by its start.) {table}: an event table, by name.
SELECT min(start) AS first, max(COALESCE("end", start)) AS last FROM src."{table}"
