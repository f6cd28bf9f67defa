-- OS runtime calls (nsys -t osrt: pthread, poll, futex waits, file I/O...) of the run's process ($pid; NULL:
-- all), for what a host thread was doing while the GPU idled.
INSERT INTO os_calls
SELECT $run_id, o.globalTid, o.start, o."end", s.value, o.nestingLevel
FROM ns.OSRT_API o
JOIN ns.StringIds s ON s.id = o.nameId
WHERE o."end" > o.start AND ($pid IS NULL OR o.globalTid - o.globalTid % 16777216 = $pid)
