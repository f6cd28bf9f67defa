-- A table the analysis reads once per trace (strings, export metadata, the GPU): copied as it is.
CREATE TABLE dst."{table}" AS SELECT * FROM src."{table}"
