"""What a user runs to measure: `python -m benchmarks.<name>` from the repository root (see
README.md)."""
