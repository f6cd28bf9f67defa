"""A run's record (bubblelab.runs.record): gzipped, read back whole, older sweeps' plain .json
records still read, and a sweep copied off the GPU machine assembled and reported where no torch is
installed."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bubblelab.runs.assemble import assemble
from bubblelab.runs.record import find_record, load_record, read_record, records_in, tag_of
from bubblelab.runs.rundir import read_results
from bubblelab.runs.state import damaged_runs, finished_runs
from bubblelab.runs.sweep import SweepSpec, run_sweep

TAGS = ["s2-d1-r0", "s2-d2-r0"]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("records") / "sweep"
    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=5, requests_per_stream=2,
                     prompt_len=6, repeats=1, max_model_len=64)  # fmt: skip
    run_sweep(spec, out, use_nsys=False)
    return out


def test_records_are_gzipped_and_read_back_whole(sweep_dir):
    plain = sweep_dir / "runs" / "plain"
    assert [p.name for p in records_in(plain)] == [f"{t}.json.gz" for t in TAGS]
    for tag in TAGS:
        path = find_record(plain, tag)
        assert path is not None and tag_of(path) == tag
        record = json.loads(gzip.decompress(path.read_bytes()))
        assert read_record(plain, tag) == record
        assert {"summary", "timeline", "requests"} <= set(record)
        assert record["summary"]["depth"] == int(tag[4])
    assert finished_runs(sweep_dir) == {f"plain/{t}" for t in TAGS}


def test_an_older_sweeps_plain_json_records_read_the_same(sweep_dir, tmp_path):
    old = tmp_path / "old"
    subprocess.run(["cp", "-r", str(sweep_dir), str(old)], check=True)
    for path in records_in(old / "runs" / "plain"):  # as sweeps before gzipped records left them
        path.with_name(tag_of(path) + ".json").write_bytes(gzip.decompress(path.read_bytes()))
        path.unlink()
    assert finished_runs(old) == finished_runs(sweep_dir)
    (old / "results.json.gz").unlink()
    assemble(old)
    new, again = read_results(sweep_dir), read_results(old)
    assert list(again.runs["run_id"]) == list(new.runs["run_id"])
    assert again.steps.drop(columns="run_dir", errors="ignore").equals(
        new.steps.drop(columns="run_dir", errors="ignore")
    )


@pytest.mark.parametrize("cut", ["truncated", "not gzip", "not json"])
def test_a_damaged_record_is_told_apart_not_read(sweep_dir, tmp_path, cut):
    path = tmp_path / "s2-d1-r0.json.gz"
    whole = (sweep_dir / "runs" / "plain" / path.name).read_bytes()
    path.write_bytes(
        {
            "truncated": whole[: len(whole) // 2],
            "not gzip": b'{"summary": {}}',
            "not json": gzip.compress(b'{"summary": '),
        }[cut]  # fmt: skip
    )
    with pytest.raises(ValueError, match="s2-d1-r0"):
        load_record(path)


def test_damaged_records_are_listed_not_counted_as_finished(sweep_dir, tmp_path):
    out = tmp_path / "cut"
    subprocess.run(["cp", "-r", str(sweep_dir), str(out)], check=True)
    record = out / "runs" / "plain" / "s2-d2-r0.json.gz"
    record.write_bytes(record.read_bytes()[:50])
    assert finished_runs(out) == {"plain/s2-d1-r0"}
    assert damaged_runs(out) == [record]


BLOCK_TORCH = """
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "triton", "transformers"):
            raise ModuleNotFoundError(f"{name} is blocked", name=name)
        return None

sys.meta_path.insert(0, Blocked())
from bubblelab.cli import main
main(sys.argv[1:])
"""


def test_a_sweep_copied_to_a_machine_without_torch_is_assembled_and_reported(sweep_dir, tmp_path):
    """The run directory comes back from the GPU machine; the laptop has no torch. Its report
    assembles the records (results.json removed) and writes the page."""
    out = tmp_path / "copied"
    subprocess.run(["cp", "-r", str(sweep_dir), str(out)], check=True)
    (out / "results.json.gz").unlink()
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH, "report", str(out), "--n-boot", "20"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(out / "report.html")
    assert sorted(read_results(out).runs["run_id"]) == [f"{t}-timeline" for t in TAGS]
