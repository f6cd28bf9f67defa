"""Tensor parallelism over the GPUs of one host: the parallel layers, the collectives, the step
hand-off from rank 0 (scheduler and pipeline) to the worker processes, and the workers' loop
(docs/tensor-parallel.md)."""
