"""Profiling: NVTX phases, the in-process timeline, nsys run-and-profile, DuckDB ingestion and
queries."""
