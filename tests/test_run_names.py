"""Runs named by where they came from (issue #29 item 2): another engine's trace by its file's
stem, unique within one output; ours by model, streams, depth and repeat; the same name in the
console, Parquet (run_name) and Perfetto (the process)."""

from __future__ import annotations

import gzip
import json
import shutil

import pandas as pd

from bubblelab.cli import main
from bubblelab.report.export import export
from bubblelab.runs.tables import config_names, trace_stem
from tests.cli_helpers import ROOT

FOREIGN = ROOT / "traces" / "foreign"


def test_a_trace_file_gives_its_stem():
    assert trace_stem("/x/cupy-decode.sqlite.gz") == "cupy-decode"
    assert trace_stem("jax.nsys-rep") == "jax" and trace_stem(None) is None


def test_foreign_runs_by_stem_unique_ours_by_configuration():
    runs = [
        {"run_id": "a1", "model": "see workload", "trace_path": "/one/decode.sqlite.gz"},
        {"run_id": "b2", "model": "see workload", "trace_path": "/two/decode.sqlite"},
        {
            "run_id": "c3",
            "model": "qwen3-0.6b",
            "streams": 32,
            "depth": 2,
            "trace_path": "/q.sqlite",
        },
        {"run_id": "d4", "preset": "qwen3-0.6b", "model": "/ckpt", "streams": 32, "depth": 2},
    ]
    assert list(config_names(runs).values()) == [
        "decode", "decode·2", "qwen3-0.6b·s32·d2·r0", "qwen3-0.6b·s32·d2·r1",
    ]  # fmt: skip


def test_analyze_names_foreign_traces_by_their_files(tmp_path, capsys):
    twin = tmp_path / "cupy-decode.sqlite.gz"  # another file of the same stem
    shutil.copy(FOREIGN / "jax-decode.sqlite.gz", twin)
    main(["analyze", str(FOREIGN / "cupy-decode.sqlite.gz"), str(twin),
          str(FOREIGN / "hf-generate.sqlite.gz"), "--json"])  # fmt: skip
    names = [run["name"] for run in json.loads(capsys.readouterr().out)["runs"]]
    assert names == ["cupy-decode", "cupy-decode·2", "hf-generate"]


def test_the_same_name_in_the_console_parquet_and_perfetto(tmp_path, capsys):
    for trace, name in (("foreign/nano-vllm-fork", "nano-vllm-fork"),
                        ("qwen3-0.6b-s1-d2", "qwen3-0.6b·s1·d2·r0")):  # fmt: skip
        source = ROOT / "traces" / f"{trace}.sqlite.gz"
        main(["analyze", str(source)])
        assert name in capsys.readouterr().out
        exported = export(source, tmp_path / name)
        assert pd.read_parquet(tmp_path / name / "runs.parquet")["run_name"].tolist() == [name]
        events = json.loads(gzip.decompress(exported.trace.read_bytes()))["traceEvents"]
        assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == [name]
