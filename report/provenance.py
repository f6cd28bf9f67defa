"""Where the numbers come from, said once per run directory: the command, the code's revision, the
machine (CPU and GPU models and clocks), the software, and the sweep's settings.

A sweep's runs share all of this, so the report shows it once per source and lists the runs
themselves in one folded table, instead of repeating it per run.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
from collections.abc import Iterable

import jinja2
import matplotlib
import numpy as np
import pandas as pd

from ..runs.rundir import Results

SHOWN = ("command", "machine", "sweep")  # provenance keys shown as facts; the rest summarised
NOT_RECORDED = "not recorded"
SHORT = 100  # characters: a value this short is shown whole; a longer one as a summary, JSON folded


def sources(results: Results, name: str) -> list[dict]:
    """One record per source (run directory) of results: name, facts [(what, text)], other
    provenance [{key, summary, json}] (json: the whole value, folded on the page; None when the
    summary is all of it), and its number of runs."""
    named = results.provenance.get("sources")
    if "run_dir" in results.runs and isinstance(named, dict):
        parts = [(n, results.runs[results.runs["run_dir"] == n], p) for n, p in named.items()]
    else:
        parts = [(name, results.runs, results.provenance)]
    return [
        {
            "name": n,
            "runs": len(runs),
            "facts": facts(runs, p if isinstance(p, dict) else {}),
            "other": [_other(k, v) for k, v in (p or {}).items() if k not in SHOWN],
        }
        for n, runs, p in parts
    ]


def facts(runs: pd.DataFrame, provenance: dict) -> list[tuple[str, str]]:
    machine = provenance.get("machine") or {}
    out = [
        ("command", _text(provenance.get("command")) or _one_or_many(runs.get("command"))),
        ("git revision", _git(machine)),
        ("CPU", _cpu(machine)),
    ]
    if gpu := _gpu(machine, runs):
        out.append(("GPU", gpu))
    if clocks := _clocks(runs):
        out.append(("during the runs", clocks))
    out.append(("software", _software(machine, runs)))
    if isinstance(sweep := provenance.get("sweep"), dict):
        out.append(("sweep", ", ".join(f"{k}={v}" for k, v in sweep.items())))
    return out


def report_facts() -> list[tuple[str, str]]:
    """The machine that wrote the report (not the one that measured)."""
    return [
        ("report built", dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("python", platform.python_version()),
        ("pandas", pd.__version__),
        ("matplotlib", matplotlib.__version__),
        ("jinja2", jinja2.__version__),
    ]


def device_names(runs: pd.DataFrame) -> list[str]:
    """The devices the runs ran on, a CPU device named as such."""
    names = dict.fromkeys(_device(d) for d in runs.get("device", pd.Series(dtype=str)).dropna())
    return list(names)


def _device(name: object) -> str:
    return "CPU" if str(name).lower() == "cpu" else str(name)


def _git(machine: dict) -> str:
    revision = machine.get("git_revision")
    if not revision:
        return NOT_RECORDED
    return f"{revision}{' (with uncommitted changes)' if machine.get('git_dirty') else ''}"


def _cpu(machine: dict) -> str:
    if not machine.get("cpu_model"):
        return NOT_RECORDED
    parts = [str(machine["cpu_model"])]
    if machine.get("cpu_count"):
        parts.append(f"{machine['cpu_count']} logical cores")
    if machine.get("cpu_mhz"):
        clock = f"{machine['cpu_mhz']:,.0f} MHz"
        if machine.get("cpu_max_mhz"):
            clock += f" (max {machine['cpu_max_mhz']:,.0f} MHz)"
        parts.append(clock)
    return " · ".join(parts)


def _gpu(machine: dict, runs: pd.DataFrame) -> str | None:
    """The GPUs of the machine, else those the runs name; None for CPU runs on a machine without."""
    gpus = machine.get("gpus") or []
    if gpus:
        described = list(dict.fromkeys(_describe_gpu(g) for g in gpus))
        count = f"{len(gpus)} × " if len(gpus) > 1 and len(described) == 1 else ""
        return count + "; ".join(described)
    devices = [d for d in device_names(runs) if d != "CPU"]
    if not devices:
        return None if "CPU" in device_names(runs) else NOT_RECORDED
    drivers = _distinct(runs.get("driver"))
    return " · ".join([", ".join(devices), *(f"driver {d}" for d in drivers)])


def _describe_gpu(gpu: dict) -> str:
    parts = [str(gpu.get("name")), f"driver {gpu.get('driver')}"]
    if gpu.get("sm_clock_max_mhz"):
        parts.append(f"max SM clock {gpu['sm_clock_max_mhz']:,.0f} MHz")
    if gpu.get("power_limit_w"):
        parts.append(f"power limit {gpu['power_limit_w']:,.0f} W")
    return " · ".join(parts)


def _clocks(runs: pd.DataFrame) -> str | None:
    parts = []
    for column, what, unit in (
        ("sm_clock_mhz", "SM clock", "MHz"),
        ("power_w", "power", "W"),
    ):
        values = pd.to_numeric(runs.get(column, pd.Series(dtype=float)), errors="coerce").dropna()
        if len(values):
            spread = f" (runs {values.min():,.0f}-{values.max():,.0f})" if len(values) > 1 else ""
            parts.append(f"{what} median {np.median(values):,.0f} {unit}{spread}")
    anchors = pd.to_numeric(
        runs.get("clock_anchor_us_max", pd.Series(dtype=float)), errors="coerce"
    )
    if anchors.notna().any():
        parts.append(f"device clock re-anchored by at most {anchors.max():,.1f} µs")
    return " · ".join(parts) or None


def _software(machine: dict, runs: pd.DataFrame) -> str:
    parts = [f"torch {v}" for v in _distinct(runs.get("torch"))]
    parts += [f"nsys {v}" for v in _distinct(runs.get("nsys_version"))]
    for key in ("python", "bubblelab", "os"):
        if machine.get(key):
            parts.append(f"{key} {machine[key]}")
    return " · ".join(parts) or NOT_RECORDED


def _distinct(values: Iterable | None) -> list[str]:
    if values is None:
        return []
    return list(dict.fromkeys(str(v) for v in values if isinstance(v, str) and v))


def _one_or_many(commands: pd.Series | None) -> str:
    distinct = _distinct(commands)
    if not distinct:
        return NOT_RECORDED
    if len(distinct) == 1:
        return distinct[0]
    return f"{distinct[0]}\n… and {len(distinct) - 1} more, one per run (in the run list)"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _other(key: str, value: object) -> dict:
    """A provenance entry as one line of the facts table: short values whole, long ones (a
    sweep's timings: ~1,500 px of JSON) as their top-level keys or length, the JSON folded."""
    flat = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(flat) <= SHORT:
        return {"key": key, "summary": flat, "json": None}
    if isinstance(value, dict):
        summary = f"{len(value)} entries: " + ", ".join(
            f"{k} {_scalar(v)}" if _scalar(v) else str(k) for k, v in value.items()
        )
    elif isinstance(value, list):
        summary = f"{len(value)} items"
    else:
        summary = flat[:SHORT] + "…"
    if len(summary) > 2 * SHORT:
        summary = summary[: 2 * SHORT].rsplit(", ", 1)[0] + ", …"
    pretty = value if isinstance(value, str) else json.dumps(value, indent=1, default=str)
    return {"key": key, "summary": summary, "json": pretty}


def _scalar(value: object) -> str:
    """A number, text or flag as a few characters; "" for anything nested. A dict holding only
    wall_s (a sweep's timings per pass) reads as its seconds."""
    if isinstance(value, dict) and set(value) == {"wall_s"}:
        value = value["wall_s"]
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, int):
        return str(value)  # 16384 tokens, never 1.638e+04
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return value if isinstance(value, str) and len(value) <= 24 else ""
