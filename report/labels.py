"""How the report and the exports name runs and devices: a run whose metadata may be incomplete (a
bare nsys trace has no model, streams or depth in its run row), and a CPU device as a CPU."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ..costmodel.predict import run_label
from ..runs.tables import config_names


def run_names(runs: pd.DataFrame) -> dict[str, str]:
    """Each run's own name, by run_id: its trace file's stem, or model·streams·depth·repeat
    (runs.tables.config_names owns the rule), the same in the console, Parquet and Perfetto."""
    return config_names(runs.to_dict("records"))


def run_name(run: dict | pd.Series, depth: bool = True) -> str:
    """costmodel.predict.run_label (it leaves out what a trace does not know); a run that names no
    model at all goes by its run id."""
    if any(isinstance(run.get(k), str) and run.get(k) for k in ("preset", "model")):
        return run_label(run, depth=depth)
    return f"run {run['run_id']} · {run.get('device')}"


def device_word(devices: Iterable[object]) -> str:
    """What to call the device lane: "GPU", "CPU" (the engine's device worker on the host), or
    "device" when runs of both are shown together."""
    kinds = {"CPU" if str(d).lower() == "cpu" else "GPU" for d in devices}
    return kinds.pop() if len(kinds) == 1 else "device"
