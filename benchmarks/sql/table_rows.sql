-- How big did the scaled-up trace get? Rows of one of its tables.
SELECT count(*) FROM big."{table}"
