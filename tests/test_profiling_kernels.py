"""The kernel-level view (profiling.kernels) against brute force in pandas over the raw SQLite rows,
on a hand-laid synthetic trace and on a committed H200 engine trace."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bubblelab.profiling import kernels
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest, ingest_trace
from bubblelab.report.export import OP_STEPS, export, op_window
from bubblelab.report.report import report_run_dir
from tests.cli_helpers import run_bubblelab
from tests.profiling_trace_builder import blocking_trace

TRACES = Path(__file__).parents[1] / "traces"


@pytest.fixture(scope="module", params=["synthetic", "qwen3-0.6b-s32-d2.sqlite.gz"])
def case(request, tmp_path_factory):
    """(catalog, run_id, raw rows) of one trace."""
    tmp = tmp_path_factory.mktemp("kernels")
    if request.param == "synthetic":
        path = blocking_trace(tmp / "d1.sqlite")
    else:
        path = tmp / "trace.sqlite"
        with gzip.open(TRACES / request.param) as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    con = connect(None)
    run_id = ingest(path, None, con=con)
    return con, run_id, raw_rows(path)


def raw_rows(path: Path) -> dict[str, pd.DataFrame]:
    """The export's kernels, copies/memsets and CUDA API calls, names resolved."""
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def read(sql: str) -> pd.DataFrame:
        return pd.read_sql_query(sql, db)

    rows = {
        "kernels": read(
            "SELECT k.start, k.end, k.correlationId AS cid, s.value AS name "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName"
        ),
        "api": read(
            "SELECT r.start, r.end, r.correlationId AS cid, s.value AS name "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId"
        ),
        "copies": pd.concat(
            [
                read(f"SELECT start, end FROM {t}")
                for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
                if t in tables
            ]
        ),  # fmt: skip
    }
    db.close()
    return rows


def union(intervals) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals) -> int:
    return sum(b - a for a, b in intervals)


def overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Length of the intersection of two disjoint sorted interval lists."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def intervals(frame: pd.DataFrame) -> list[tuple[int, int]]:
    return list(zip(frame.start.tolist(), frame.end.tolist(), strict=True))


def test_top_kernels_match_brute_force(case):
    con, run_id, raw = case
    busy = length(union(intervals(raw["kernels"]) + intervals(raw["copies"])))
    d = raw["kernels"].assign(ns=raw["kernels"].end - raw["kernels"].start)
    brute = d.groupby("name").ns.agg(["count", "sum", "mean", "max"])
    for q in (0.5, 0.9, 0.99):
        brute[q] = d.groupby("name").ns.quantile(q)
    brute = brute.reset_index().sort_values(["sum", "name"], ascending=[False, True])
    top = 3
    got = kernels.top_kernels(con, run_id, top=top)
    assert len(got) == min(top, len(brute)) + (len(brute) > top)
    for (_, want), (_, row) in zip(brute.head(top).iterrows(), got.iterrows(), strict=False):
        assert row["name"] == want["name"] and row.calls == want["count"]
        assert row.total_ms == pytest.approx(want["sum"] / 1e6)
        assert row.mean_us == pytest.approx(want["mean"] / 1e3)
        for q, column in ((0.5, "p50_us"), (0.9, "p90_us"), (0.99, "p99_us")):
            assert row[column] == pytest.approx(want[q] / 1e3)
        assert row.max_us == pytest.approx(want["max"] / 1e3)
        assert row.busy_share == pytest.approx(want["sum"] / busy)
    if len(brute) > top:
        rest = got.iloc[-1]
        assert rest.kernel == f"other {len(brute) - top} kernels" and pd.isna(rest["name"])
        assert rest.calls == brute["count"].iloc[top:].sum()
        assert rest.total_ms == pytest.approx(brute["sum"].iloc[top:].sum() / 1e6)
    assert got.calls.sum() == len(d)


def test_kernel_classes_cover_every_op_once(case):
    """Every kernel, copy and memset counted once, in one class, under its step's kind; sampling
    is what was launched under a `sampling` range; per-step figures divide by that kind's steps."""
    con, run_id, raw = case
    got = kernels.kernel_classes(con, run_id)
    ns = lambda f: int((f.end - f.start).sum())  # noqa: E731
    assert got.ops.sum() == len(raw["kernels"]) + len(raw["copies"])
    assert got.total_ms.sum() == pytest.approx((ns(raw["kernels"]) + ns(raw["copies"])) / 1e6)
    assert got.share.sum() == pytest.approx(1)
    assert set(got["class"]) <= {
        "gemm", "attention", "sampling", "elementwise", "collective", "copy", "other"
    }  # fmt: skip
    ops = con.execute(
        'SELECT o."end" - o.start AS ns, o.phase, o.op, o.name, s.kind FROM gpu_ops o '
        "LEFT JOIN steps s ON s.run_id = o.run_id AND s.step = o.step WHERE o.run_id = ?",
        [run_id],
    ).df()
    # sampling: launched under a sampling range, or (no range: other engines) named for it
    pattern = r"(?i)argmax|multinomial|exponential|gumbel|top_?k_|top_?p_|sampl"
    named = ops.name.str.contains(pattern)
    sampling = ops[(ops.op == "kernel") & ((ops.phase == "sampling") | named)]
    assert got[got["class"] == "sampling"].total_ms.sum() == pytest.approx(sampling.ns.sum() / 1e6)
    steps = con.execute(
        "SELECT kind, count(*) AS n FROM steps WHERE run_id = ? GROUP BY kind", [run_id]
    ).df()
    for kind, n in zip(steps.kind, steps.n, strict=True):
        rows = got[got.kind == kind]
        assert rows.per_step_ms.to_numpy() == pytest.approx(rows.total_ms.to_numpy() / n)
        assert rows.total_ms.sum() == pytest.approx(ops[ops.kind == kind].ns.sum() / 1e6)


def test_kernel_classes_read_flash_attn_4_as_attention(tmp_path):
    """nano-vllm's committed write-up trace (H200): flash-attn-4's CuTe kernels carry `cutlass` in
    their names, and are attention, one a layer a decode step; its sampling, which it marks with
    no range, is found by name."""
    path = tmp_path / "nano.sqlite"
    with gzip.open(TRACES / "foreign" / "nanovllm-nvtx.sqlite.gz") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    con = connect(None)
    run_id = ingest_trace(path, None, con=con)[0]
    got = kernels.kernel_classes(con, run_id).set_index(["kind", "class"])
    steps = con.execute("SELECT count(*) FROM steps WHERE run_id = ? AND kind = 'decode'", [run_id])
    decode_steps = steps.fetchone()[0]
    assert got.loc[("decode", "attention")].ops == 36 * decode_steps  # qwen3-4b's 36 layers
    assert got.loc[("decode", "sampling")].ops == decode_steps
    flash_kernels = con.execute(
        "SELECT count(*) FROM gpu_ops WHERE run_id = ? AND name ILIKE '%flash%'", [run_id]
    ).fetchone()[0]
    assert flash_kernels == got.xs("attention", level="class").ops.sum()


def test_cuda_api_summary_matches_brute_force(case):
    con, run_id, raw = case
    d = raw["api"].assign(ns=raw["api"].end - raw["api"].start)
    got = kernels.cuda_api_summary(con, run_id).set_index("name")
    assert set(got.index) == set(d.name)
    for name, calls in d.groupby("name"):
        row = got.loc[name]
        assert row.calls == len(calls)
        assert row.total_ms == pytest.approx(calls.ns.sum() / 1e6)
        assert row.p50_us == pytest.approx(calls.ns.quantile(0.5) / 1e3)
        assert row.p99_us == pytest.approx(calls.ns.quantile(0.99) / 1e3)
    assert got.share.sum() == pytest.approx(1)


def test_launch_latency_matches_brute_force(case):
    con, run_id, raw = case
    first = raw["kernels"].groupby("cid").start.min().rename("kernel_start")
    launches = raw["api"].join(first, on="cid", how="inner")
    launches["latency_us"] = (launches.kernel_start - launches.start) / 1e3
    got = kernels.launches(con, run_id)
    assert len(got) == len(launches)
    assert np.allclose(sorted(got.latency_us), sorted(launches.latency_us))
    summary = kernels.launch_latency(con, run_id)
    run = summary[summary.scope == "run"].iloc[0]
    assert run.launches == len(launches)
    assert run.median_us == pytest.approx(launches.latency_us.median())
    assert run.p90_us == pytest.approx(launches.latency_us.quantile(0.9))
    steps = summary[summary.scope == "step"].dropna(subset=["step"]).set_index("step")
    for step, rows in got.dropna(subset=["step"]).groupby("step"):
        assert steps.loc[step].median_us == pytest.approx(rows.latency_us.median())
        assert steps.loc[step].p90_us == pytest.approx(rows.latency_us.quantile(0.9))
    per_api = summary[summary.scope == "api"]
    assert per_api.launches.sum() == len(launches)


def test_run_split_matches_brute_force_and_adds_up(case):
    con, run_id, raw = case
    compute = union(intervals(raw["kernels"]))
    busy = union(intervals(raw["kernels"]) + intervals(raw["copies"]))
    every = pd.concat([raw["kernels"], raw["copies"], raw["api"]])
    span = int(every.end.max() - every.start.min())
    steps = con.execute(
        "SELECT gpu_start_ns, gpu_end_ns, period_ms FROM steps"
        " WHERE run_id = ? AND gpu_start_ns IS NOT NULL ORDER BY step",
        [run_id],
    ).df()
    extents = union(
        (int(r.gpu_start_ns), int(r.gpu_end_ns) if pd.isna(r.period_ms)
         else int(r.gpu_start_ns) + round(r.period_ms * 1e6))
        for r in steps.itertuples()
    )  # fmt: skip
    idle_in = length(extents) - overlap(extents, busy)
    want = {
        "compute": length(compute),
        "copies": length(busy) - length(compute),
        "idle in steps": idle_in,
        "idle between steps": span - length(busy) - idle_in,
    }
    got = kernels.run_split(con, run_id).set_index("part")
    assert list(got.index) == list(want)
    for part, ns in want.items():
        assert got.loc[part, "ms"] == pytest.approx(ns / 1e6, abs=1e-6)
        assert 0 <= got.loc[part, "share"] <= 1
    assert got.share.sum() == pytest.approx(1)


def test_kernel_view_is_json_ready(case):
    con, run_id, _ = case
    view = kernels.kernel_view(con, run_id, top=2)
    assert set(view) == {
        "note", "top_kernels", "kernel_classes", "cuda_api", "launch_latency", "run_split"
    }  # fmt: skip
    assert view["note"] is None  # node-traced (or eager) kernels: all of them are seen
    assert len(view["top_kernels"]) <= 3
    assert all(
        type(v) in (int, float, str, bool, type(None)) for r in view["cuda_api"] for v in r.values()
    )


def test_kernel_names_shortened_for_display():
    con = connect(None)
    con.execute(
        'INSERT INTO gpu_ops (run_id, op, start, "end", name) VALUES '
        "('r', 'kernel', 0, 10, 'void at::native::vectorized_elementwise_kernel<4, F>(int, T)'), "
        "('r', 'kernel', 20, 25, 'nvjet_sm90_tst')"
    )
    con.execute("INSERT INTO gpu_busy VALUES ('r', 0, 10, 0), ('r', 20, 25, 10)")
    got = kernels.top_kernels(con, "r")
    assert got.kernel.tolist() == ["vectorized_elementwise_kernel", "nvjet_sm90_tst"]
    assert got.name.iloc[0].startswith("void at::native::")
    assert got.busy_share.tolist() == pytest.approx([10 / 15, 5 / 15])


def test_analyze_kernels_flag(tmp_path):
    trace = blocking_trace(tmp_path / "d1.sqlite")
    result = run_bubblelab(
        "analyze", str(trace), "--warmup", "1", "--kernels", "--json", columns=120, timeout=120
    )
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    view = run["kernels"]
    top = view["top_kernels"][0]
    assert (top["kernel"], top["calls"], top["total_ms"]) == ("gemm_a", 6, pytest.approx(1.8))
    assert sum(r["share"] for r in view["run_split"]) == pytest.approx(1)
    assert {r["scope"] for r in view["launch_latency"]} == {"run", "api", "step"}
    printed = run_bubblelab(
        "analyze", str(trace), "--warmup", "1", "--kernels", columns=120, timeout=120
    )
    assert printed.returncode == 0, printed.stderr
    assert "top kernels by GPU time" in printed.stdout and "gemm_a" in printed.stdout
    assert "idle between steps" in printed.stdout and "cudaEventSynchronize" in printed.stdout
    plain = run_bubblelab(
        "analyze", str(trace), "--warmup", "1", "--json", columns=120, timeout=120
    )
    assert "kernels" not in json.loads(plain.stdout)["runs"][0]


def test_perfetto_export_carries_ops_and_launch_flows(tmp_path):
    """Kernels, copies and API calls on tracks of their own; a flow from each launch to its op."""
    trace = blocking_trace(tmp_path / "d1.sqlite")
    exported = export(trace, tmp_path / "out")
    events = json.loads(gzip.decompress(exported.trace.read_bytes()))["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    by_track: dict[str, list[dict]] = {}
    for e in events:
        if e["ph"] == "X":
            by_track.setdefault(tracks[(e["pid"], e["tid"])], []).append(e)
    raw = raw_rows(trace)
    kernels_shown = [e for name, es in by_track.items() if name.startswith("kernels") for e in es]
    copies_shown = [e for name, es in by_track.items() if name.startswith("copies") for e in es]
    api_shown = [e for name, es in by_track.items() if name.startswith("CUDA API") for e in es]
    assert sorted(e["name"] for e in kernels_shown) == sorted(raw["kernels"].name)
    assert len(copies_shown) == len(raw["copies"]) and len(api_shown) == len(raw["api"])
    outs = {e["bind_id"]: e for e in events if e.get("flow_out")}
    ins = {e["bind_id"]: e for e in events if e.get("flow_in")}
    launched = set(raw["kernels"].cid)  # every kernel here has a launch call of its own
    assert len(outs) == len(ins) >= len(launched) and set(outs) == set(ins)
    for bind_id, launch in outs.items():
        op = ins[bind_id]
        assert launch["args"]["correlation_id"] == op["args"]["correlation_id"]
        assert launch["ts"] <= op["ts"]  # the call came before its work


def test_parquet_export_has_kernels_and_api(tmp_path):
    trace = blocking_trace(tmp_path / "d1.sqlite")
    exported = export(trace, tmp_path / "out")
    assert {p.name for p in exported.tables} >= {"kernels.parquet", "api.parquet"}
    table = pd.read_parquet(tmp_path / "out" / "kernels.parquet").set_index("name")
    raw = raw_rows(trace)["kernels"]
    assert table.calls.to_dict() == raw.name.value_counts().to_dict()  # every kernel, no "other"
    assert table.loc["gemm_a", "total_ms"] == pytest.approx(1.8)
    api = pd.read_parquet(tmp_path / "out" / "api.parquet")
    assert api.calls.sum() == len(raw_rows(trace)["api"]) and set(api["rank"]) == {0}


def test_report_has_a_kernels_section(tmp_path):
    trace = blocking_trace(tmp_path / "d1.sqlite")
    page = report_run_dir(trace, n_boot=10, export=False, out=tmp_path / "r.html").read_text()
    section = page[page.index('id="kernels"') : page.index('id="gaps"')]
    assert "gemm_a" in section and "argmax" in section
    bars = re.findall(r'<div class="splitbar">(.*?)</div>', section)
    con = connect(None)
    run_id = ingest(trace, None, con=con)
    kinds = set(kernels.kernel_classes(con, run_id).kind)
    assert len(bars) == len(kinds) + 1  # a bar per step kind, then the whole capture's
    for bar in bars:  # each fills its line
        widths = [float(w) for w in re.findall(r"width: ([\d.]+)%", bar)]
        assert sum(widths) == pytest.approx(100, abs=0.05)
    assert "class-gemm" in section and "ms of GPU time a step" in section


def test_the_export_keeps_the_ops_of_the_middle_steps_and_every_steps_host_phases(tmp_path):
    """A sweep's million kernels make a trace too big to open: by default the ops of the middle
    op_steps steps of each run are exported, whole (each launch with its work), and every step's
    host phases; op_steps=None (`export --all-ops`) keeps every op."""
    trace = blocking_trace(tmp_path / "d1.sqlite")

    def slices(op_steps):
        exported = export(trace, tmp_path / f"out-{op_steps}", op_steps=op_steps)
        doc = json.loads(gzip.decompress(exported.trace.read_bytes()))
        events = doc["traceEvents"]
        names = {
            (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
        }
        out: dict[str, list[dict]] = {}
        for e in events:
            if e["ph"] == "X":
                track = names[(e["pid"], e["tid"])].split(",")[0].split(" ")[0]
                out.setdefault(track, []).append(e)
        return exported, doc, out, events

    every, _, all_ops, _ = slices(None)
    cut, doc, windowed, events = slices(2)
    assert every.op_steps is None and cut.op_steps == 2
    assert "middle 2 steps" in doc["otherData"]["kernels, copies and CUDA API calls"]
    steps = sorted(
        {e["args"]["step"] for e in all_ops["kernels"] if e["args"].get("step") is not None}
    )
    middle = steps[(len(steps) - 2) // 2 :][:2]
    for track in ("kernels", "CUDA"):
        assert {e["args"]["step"] for e in windowed[track]} == set(middle), track
        assert len(windowed[track]) == sum(e["args"].get("step") in middle for e in all_ops[track])
    assert len(windowed["host"]) == len(all_ops["host"])  # every step's phases either way
    outs = {e["bind_id"] for e in events if e.get("flow_out")}
    assert outs and outs == {e["bind_id"] for e in events if e.get("flow_in")}


@pytest.mark.parametrize(
    ("steps", "op_steps", "window"),
    [([5, 1, 2, 3, 4, 6], 2, (3, 4)), ([1, 2, 3], 3, None), ([1, 2, 3], None, None),
     ([0, 1, 2, 3, 4], 2, (1, 2)), ([7, 7, 8, 9], 1, (8, 8))],
)  # fmt: skip
def test_op_window_is_the_middle_steps(steps, op_steps, window):
    assert op_window(pd.Series(steps), op_steps) == window


def test_export_help_names_the_window_the_library_uses():
    done = run_bubblelab("export", "--help", columns=400, timeout=60)
    assert done.returncode == 0 and f"the middle {OP_STEPS} steps of each run" in done.stdout
