"""Make traces/foreign/: the test fixtures cut from the foreign traces of the GPU machine.

    .venv/bin/python -m tools.traces.foreign_fixtures

Reads the traces tools/traces/make_foreign_traces.py brought back and writes each to
traces/foreign/ at most ~1.5 MB gzipped: whole when it already is (the same bytes, so the same run
id; such a trace is kept once, as the fixture), else cut to a window of steps by
profiling.trim.trim_foreign (every table the analysis reads, the rows of those steps) from the
whole export kept in docs/measurements/2026-11-23/foreign/ (each under 20 MiB). The
window starts at step 0 so the fixtures keep what comes before the decode steps (nano-vllm's and
the fork's prefill, transformers generate's host checks and prefill). index.json gets the source
entry plus the GPU, the nsys and driver versions read from the trace, and what was cut.
Deterministic: running it again writes the same bytes.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest_trace
from bubblelab.profiling.steps import StepOptions
from bubblelab.profiling.trim import trim_foreign

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (  # each GPU run's folder: its index.json, and the exports too big to keep whole
    ROOT / "docs" / "measurements" / "2026-11-23" / "foreign",
    ROOT / "docs" / "measurements" / "2026-11-26" / "foreign",  # torch-graphs, torch-compiled
)
TARGET = ROOT / "traces" / "foreign"
# steps kept (first, last) of the traces too big whole; the rest are copied as they are
WINDOWS = {
    "hf-generate.sqlite.gz": (0, 19),  # 5 host checks, the prefill, 14 decode steps: 1.48 MB
    "jax-decode.sqlite.gz": (0, 149),  # 150 of 198 steps: 1.31 MB
    # two processes, traced whole: rank 0's steps 0-10 are the start-up and a warm-up generate,
    # 11-75 the workload (its prefill, 64 decode steps); both ranks' rows of those: 1.46 MB
    "nanovllm-tp2.sqlite.gz": (11, 75),
}
MAX_BYTES = 1_600_000
# what the GPU run's index left out: the fork ran on the --fork-preset checkpoint (its info in
# summary.json: ckpt qwen3-0.6b), which make_foreign_traces.py now names as it does nano-vllm's
MODELS = {"nano-vllm-fork.sqlite.gz": "qwen3-0.6b (seeded random weights)"}


def trace_facts(plain: Path) -> dict:
    """GPU, driver and nsys version as the trace records them."""
    db = sqlite3.connect(f"file:{plain}?mode=ro", uri=True)
    try:
        gpu = db.execute("SELECT name FROM TARGET_INFO_GPU LIMIT 1").fetchone()
        nsys = db.execute(
            "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_PRODUCT_VERSION'"
        ).fetchone()
        driver = db.execute(
            "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'NvDriverVersion'"
        ).fetchone()
    finally:
        db.close()
    return {
        "device": gpu[0] if gpu else None,
        "driver": driver[0] if driver else None,
        "nsys_version": nsys[0] if nsys else None,
    }


def steps_found(plain: Path, options: StepOptions) -> int:
    """Steps of the trace's busiest process (the only one, but at tensor parallel > 1)."""
    con = connect(None)
    return len(analysis.per_step(con, ingest_trace(plain, None, {}, steps=options, con=con)[0]))


def gzip_to(plain: Path, gz: Path) -> None:
    """gzip with no name and no time in the header: the same input gives the same bytes."""
    with plain.open("rb") as src, gz.open("wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as dst:
            shutil.copyfileobj(src, dst)


def gunzip_to(gz: Path, plain: Path) -> None:
    with gzip.open(gz, "rb") as src, plain.open("wb") as dst:
        shutil.copyfileobj(src, dst)


def make(sources: tuple[Path, ...] = SOURCES, target: Path = TARGET) -> dict:
    """Write target/*.sqlite.gz and target/index.json; returns the index."""
    target.mkdir(parents=True, exist_ok=True)
    index = {
        name: (source, entry)
        for source in sources
        for name, entry in json.loads((source / "index.json").read_text()).items()
    }
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name, (source, entry) in index.items():
            # a trace small enough whole is kept once: as the fixture, when the source lacks it
            whole = source / name if (source / name).is_file() else TARGET / name
            plain = tmp / name.removesuffix(".gz")
            gunzip_to(whole, plain)
            options = StepOptions(step_range=entry.get("step_range"))
            found = steps_found(plain, options)  # by today's rules, not those of the GPU run
            first, last = WINDOWS.get(name, (0, found - 1))
            if name in WINDOWS:
                cut = tmp / f"cut-{plain.name}"
                trim_foreign(plain, cut, first, last, options)
                gzip_to(cut, target / name)
                trimmed = (
                    f"steps {first}..{last} of the source trace's {found} "
                    "(profiling.trim.trim_foreign: host rows starting in those steps' windows, GPU "
                    "rows launched by them; every table the analysis reads)"
                )
            else:
                if whole != target / name:
                    shutil.copyfile(whole, target / name)
                trimmed = (
                    f"not cut: the source trace as make_foreign_traces.py wrote it ({found} steps)"
                )

            size = (target / name).stat().st_size
            if size > MAX_BYTES:
                raise SystemExit(f"{name}: {size:,} bytes gzipped, more than {MAX_BYTES:,}")
            out[name] = {
                **entry,
                **trace_facts(plain),
                **({"model": MODELS[name]} if name in MODELS else {}),
                "steps": [first, last],
                "trimmed": trimmed,
                "source_trace": str(whole.relative_to(ROOT)),
                "bytes": size,
            }
    (target / "index.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def main() -> None:
    for name, entry in make().items():
        print(f"{name}: steps {entry['steps']}, {entry['bytes']:,} bytes")


if __name__ == "__main__":
    main()
