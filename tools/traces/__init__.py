"""Traces of engines bubblelab did not build, made on the GPU machine (make_foreign_traces)."""
