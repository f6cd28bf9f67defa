"""Run directories and sweeps: where runs are made, stored and their tables assembled."""
