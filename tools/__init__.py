"""Helpers around the project, not measurements: GPU-machine staging (gpu_machine/), docs
generators (docs/) and other engines' traces (traces/). Run them from the repository root:
`python -m tools.<folder>.<name>`."""
