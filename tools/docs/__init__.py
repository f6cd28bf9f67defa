"""Generators of the committed docs tables, plots and traces from measurement outputs."""
