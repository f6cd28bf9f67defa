"""docs/measurements/README.md's table (tools/docs/generated.py registers it): every file under
docs/measurements/, what it measured, the machine, the commit, the repeats and the command.

The commands, and what no file records, come from docs/measurements/commands.toml; the GPU, torch
version, repeats and commit come from the files themselves where they record them (a JSON's
`device`, a results file's runs and sweep, a CPU benchmark's `machine`). A file no entry names, an
entry that names none, or a catalog value a file contradicts is an error: the page cannot leave a
measurement out or say something its data does not.
"""

from __future__ import annotations

import gzip
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEASUREMENTS = ROOT / "docs" / "measurements"
CATALOG = MEASUREMENTS / "commands.toml"
PAGES = {"README.md", "commands.toml"}  # the index and its source, not measurements


def entries() -> list[dict]:
    return tomllib.loads(CATALOG.read_text())["measurement"]


def data_files() -> list[str]:
    return sorted(
        str(p.relative_to(MEASUREMENTS))
        for p in MEASUREMENTS.rglob("*")
        if p.is_file() and str(p.relative_to(MEASUREMENTS)) not in PAGES
    )


def matched(entry: dict) -> list[str]:
    paths = {p for pattern in entry["files"] for p in MEASUREMENTS.glob(pattern) if p.is_file()}
    return sorted(str(p.relative_to(MEASUREMENTS)) for p in paths)


def problems() -> list[str]:
    """What keeps the index from being whole: files no entry names, entries naming no file."""
    named = [f for e in entries() for f in matched(e)]
    out = [f"{f}: in no entry of commands.toml" for f in data_files() if f not in named]
    twice = sorted({f for f in named if named.count(f) > 1})
    out += [f"{f}: in more than one entry" for f in twice]
    out += [f"{', '.join(e['files'])}: names no file" for e in entries() if not matched(e)]
    return out


def _load(path: Path) -> object:
    if path.name.endswith(".json.gz"):
        with gzip.open(path, "rt") as f:
            return json.load(f)
    if path.suffix == ".json":
        return json.loads(path.read_text())
    return None  # logs, traces, pages, plots: their entry says what they are


def recorded(path: Path) -> Iterator[tuple[str, str]]:
    """(fact, value) pairs a data file records about its own run."""
    doc = _load(path)
    if not isinstance(doc, dict):
        return
    if "schema_version" in doc:  # a run-and-profile results file
        for run in doc["runs"]:
            yield "gpu", run["device"]
            yield "torch", run["torch"]
        sweep = doc["provenance"]["sweep"]
        profiled = any(run.get("profiled") for run in doc["runs"])
        yield "repeats", f"{sweep['repeats']}" + (" + 1 under nsys" if profiled else "")
        return
    meta = {**doc.get("meta", {}), **doc.get("env", {}), **doc}
    machine = meta.get("machine")  # a benchmark's own record of its machine (runs.machine)
    gpu = meta.get("device") or meta.get("gpu")
    if isinstance(gpu, str) and not (machine and gpu in ("cuda", "cpu")):  # a name, not a kind
        yield "gpu", gpu
    if isinstance(meta.get("torch"), str):
        yield "torch", meta["torch"]
    if machine:
        gpus = machine.get("gpus") or []
        yield "gpu", gpus[0]["name"] if gpus else f"{machine['cpu_count']}-core CPU"
        yield "commit", machine["git_revision"][:7]
    # a benchmark's own count, its sweep's or its command line's
    for repeats in (
        meta.get("repeats"),
        meta.get("sweep", {}).get("repeats"),
        meta.get("args", {}).get("repeats"),
    ):
        if repeats:
            yield "repeats", str(repeats)
            break


def facts(entry: dict) -> dict[str, str]:
    """The row's machine, torch, commit and repeats: the files' own, else the catalog's."""
    seen: dict[str, set[str]] = {}
    for name in matched(entry):
        for fact, value in recorded(MEASUREMENTS / name):
            seen.setdefault(fact, set()).add(value)
    out = {}
    for fact in ("gpu", "torch", "commit", "repeats"):
        mine, theirs = seen.get(fact), entry.get(fact)
        if mine and theirs is not None and {str(theirs)} != mine:
            raise ValueError(f"{entry['files']}: commands.toml says {fact} {theirs}, files {mine}")
        out[fact] = ", ".join(sorted(mine)) if mine else str(theirs or "")
    if not out["commit"] and "added" in entry:
        out["commit"] = f"added in {entry['added']}"
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def measurements_index() -> str:
    if found := problems():
        raise ValueError("docs/measurements/commands.toml: " + "; ".join(found))
    lines = [
        "| files | what it measured | machine | commit | repeats | command |",
        "|---|---|---|---|---|---|",
    ]
    for entry in entries():
        f = facts(entry)
        machine = f["gpu"] + (f", torch {f['torch']}" if f["torch"] else "")
        files = ", ".join(f"`{g}`" for g in entry["files"])
        lines.append(
            f"| {files} | {_cell(entry['what'])} | {machine} | {f['commit']} | {f['repeats']} "
            f"| `{_cell(entry['command'])}` |"
        )
    return "\n".join(lines)
