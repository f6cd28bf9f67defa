"""The floor under the engine, profiling and the cost model: torch-free, CUDA-free."""
