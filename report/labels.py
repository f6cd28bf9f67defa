"""How the report and the exports name runs and devices: a run whose metadata may be incomplete (a
bare nsys trace has no model, streams or depth in its run row), and a CPU device as a CPU."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ..costmodel.configs import known_int, run_label
from ..runs.tables import config_names, trace_stem


def run_names(runs: pd.DataFrame) -> dict[str, str]:
    """Each run's own name, by run_id: its trace file's stem, or model·streams·depth·repeat
    (runs.tables.config_names owns the rule), the same in the console, Parquet and Perfetto."""
    return config_names(runs.to_dict("records"))


def run_name(run: dict | pd.Series, depth: bool = True) -> str:
    """costmodel.configs.run_label (it leaves out what a trace does not know). A run that names no
    model goes by what the console calls it: another engine's by its trace file (its `run_name`,
    which runs.sources gives a bare trace's runs, unique among them), ours by its id's start."""
    if any(isinstance(run.get(k), str) and run.get(k) for k in ("preset", "model")):
        return run_label(run, depth=depth)
    name = run.get("run_name")
    foreign = known_int(run.get("depth")) is None
    stem = name if foreign and isinstance(name, str) and name else None
    if foreign and stem is None:
        stem = trace_stem(run.get("trace_path"))
    return run_label({**dict(run), "model": stem or str(run["run_id"])[:8]}, depth=depth)


def device_word(devices: Iterable[object]) -> str:
    """What to call the device lane: "GPU", "CPU" (the engine's device worker on the host), or
    "device" when runs of both are shown together."""
    kinds = {"CPU" if str(d).lower() == "cpu" else "GPU" for d in devices}
    return kinds.pop() if len(kinds) == 1 else "device"
