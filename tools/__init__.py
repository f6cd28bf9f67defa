"""Helpers around the project, not measurements: GPU-machine staging (gpu_machine/) and docs
generators (docs/). Run them from the repository root: `python -m tools.<folder>.<name>`."""
