"""Every option validated at the boundary: each command with each kind of bad value exits 2 with
one line on stderr naming the option, no traceback, and nothing written (issue #14 item 3)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bubblelab.cli import main
from bubblelab.core.errors import OptionError
from bubblelab.engine.config import EngineConfig
from bubblelab.runs.demo import write_demo_run_dir
from bubblelab.runs.rundir import read_results, write_results
from bubblelab.runs.sweep import SweepSpec
from bubblelab.runs.workload import WorkloadSpec

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad")
    (root / "a dir").mkdir()
    (root / "empty dir").mkdir()
    (root / "file.txt").write_text("not a run directory")
    (root / "junk.sqlite").write_text("not a database")
    (root / "junk.duckdb").write_text("not a database")
    (root / "other.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(100))
    demo = write_demo_run_dir(root / "sim", streams=(1,), requests_per_stream=2, output_len=8)
    real = read_results(demo.parent)  # the same tables, not marked simulated: a measured run
    write_results(root / "real", real.runs, real.steps, provenance={"measured": "yes"})
    return {
        "DIR": root / "a dir",
        "EMPTY": root / "empty dir",
        "FILE": root / "file.txt",
        "JUNK": root / "junk.sqlite",
        "JUNKDB": root / "junk.duckdb",
        "SQLITE": root / "other.sqlite",
        "REAL": root / "real",
        "MISSING": root / "missing",
        "TRACE": ROOT / "traces" / "nsys-h200-probe.sqlite",
    }


# (command line, what the one line must contain). Paths are filled in from the fixture.
BAD = [
    ("run --streams 0", "--streams"),
    ("run --streams 1000000", "--streams"),
    ("run --streams 1,x", "--streams"),
    ("run --streams ,", "--streams"),
    ("run --streams 2,2", "--streams"),
    ("run --streams 1,,2", "--streams"),  # an empty item is a typo, not a value (#28)
    ("run --streams 1,2,", "--streams"),
    ("run --streams ' '", "--streams"),
    ("run --streams 2000", "--streams"),  # more than the engine's batch rows: it would only queue
    ("run --streams 16 --max-num-seqs 8", "--max-num-seqs (8)"),
    ("run --requests 0", "--requests"),
    ("run --requests 100000000", "--requests"),
    ("run --requests-per-stream 0", "--requests-per-stream"),
    ("run --requests-per-stream 2 --requests 4", "--requests-per-stream"),
    ("run --output-len-mean nan", "--output-len-mean"),
    ("run --output-len-mean inf", "--output-len-mean"),
    ("run --output-len-mean 0", "--output-len-mean"),
    ("run --output-len-mean 900", "--output-len-mean"),
    ("run --output-len-dist zipf", "--output-len-dist"),
    ("run --prompt-len -1", "--prompt-len"),
    ("run --prompt-len 0", "--prompt-len"),
    ("run --prompt-len 512", "--prompt-len"),
    ("run --prompt-len 3.5", "--prompt-len"),
    ("run --arrival-rate -1", "--arrival-rate"),
    ("run --arrival-rate 0", "--arrival-rate"),
    ("run --arrival-rate nan", "--arrival-rate"),
    ("run --temperature nan", "--temperature"),
    ("run --temperature -0.5", "--temperature"),
    ("run --max-num-seqs 0", "--max-num-seqs"),
    ("run --max-num-seqs 100000", "--max-num-seqs"),
    ("run --max-model-len 0", "--max-model-len"),
    ("run --max-model-len 1", "--max-model-len"),
    ("run --model tiny-qwen3 --max-model-len 1280", "--max-model-len must be at most the model's"),
    ("run --depth 3", "--depth"),
    ("run --depth abc", "--depth"),
    ("run --seed -1", "--seed"),
    ("run --constraint haiku", "--constraint"),
    ("run --constraint point --constrained-share 2", "--constrained-share"),
    ("run --constrained-share 0.5", "--constrained-share"),
    ("run --dtype fp8", "--dtype"),
    ("run --dtype ''", "--dtype"),
    ("run --model ''", "--model"),
    ("run --model ' '", "--model"),
    ("run --device tpu", "--device"),
    ("run --attention-backend magic", "--attention-backend"),
    ("run --json=DIR", "--json"),
    ("run --json DIR", "--json"),
    ("run --json FILE/out.json", "--json"),
    ("run --model MISSING", "MISSING"),
    ("run --no-such-option", "--no-such-option"),
    ("run-and-profile --depth 3", "--depth"),
    ("run-and-profile --depth 1,1", "--depth"),
    ("run-and-profile --depth 1,,2", "--depth"),
    ("run-and-profile --dtype ''", "--dtype"),
    ("run-and-profile --model ''", "--model"),
    ("run-and-profile --streams 0", "--streams"),
    ("run-and-profile --streams 1,2000", "--streams"),
    ("run-and-profile --repeats 0", "--repeats"),
    ("run-and-profile --requests-per-stream 0", "--requests-per-stream"),
    ("run-and-profile --output-len-mean nan", "--output-len-mean"),
    ("run-and-profile --prompt-len 600", "--prompt-len"),
    ("run-and-profile --max-model-len 1", "--max-model-len"),
    ("run-and-profile --constraint haiku", "--constraint"),
    ("run-and-profile --out FILE", "FILE"),
    ("run-and-profile --out REAL", "REAL"),
    ("run-and-profile --resume EMPTY", "EMPTY"),
    ("run-and-profile --resume REAL", "REAL"),
    ("run-and-profile --resume REAL --streams 4", "--streams"),
    ("demo --streams 0", "--streams"),
    ("demo --output-len-mean -1", "--output-len-mean"),
    ("demo --out FILE", "FILE"),
    ("demo --out REAL", "REAL"),
    ("analyze", "--catalog"),
    ("analyze --warmup -5 JUNK", "--warmup"),
    ("analyze --warmup x JUNK", "--warmup"),
    ("analyze MISSING", "MISSING"),
    ("analyze JUNK", "JUNK"),
    ("analyze --catalog SQLITE", "SQLITE"),
    ("analyze --catalog JUNKDB", "JUNKDB"),
    ("analyze --catalog MISSING", "MISSING"),
    ("analyze --json=DIR JUNK", "--json"),
    ("analyze --json DIR JUNK", "--json"),
    ("analyze --output-len-mean nan JUNK", "--output-len-mean"),
    ("analyze --output-len-mean 0 JUNK", "--output-len-mean"),
    ("analyze --gap-threshold-us -1 JUNK", "--gap-threshold-us"),
    ("analyze --gap-threshold-us nan JUNK", "--gap-threshold-us"),
    ("analyze --step-rule kernels JUNK", "--step-rule"),
    ("analyze --step-range ( JUNK", "--step-range"),
    ("analyze --domain '' TRACE", "--domain"),
    ("analyze --domain ' ' TRACE", "--domain"),
    ("analyze TRACE --warmup 100000", "--warmup leaves no steady-state step"),
    ("analyze TRACE TRACE", "TRACE"),
    ("analyze TRACE --catalog DIR", "--catalog"),
    ("predict", "--blog"),
    ("predict --blog --n-boot 0", "--n-boot"),
    ("predict --blog --n-boot 1000000000", "--n-boot"),
    ("predict --catalog MISSING", "MISSING"),
    ("predict --catalog FILE", "FILE"),
    ("predict --catalog JUNKDB", "JUNKDB"),
    ("predict --blog --json=DIR", "--json"),
    ("report MISSING", "MISSING"),
    ("report FILE", "FILE"),
    ("report EMPTY", "EMPTY"),
    ("report REAL --n-boot 0", "--n-boot"),
    ("report REAL --n-boot 1000000000", "--n-boot"),
    ("report REAL --demo", "REAL"),
    ("report FILE --demo", "FILE"),
    ("report REAL --out DIR", "--out"),
    ("export", "SOURCE"),
    ("export MISSING", "MISSING"),
    ("export FILE", "FILE"),
    ("export JUNK", "JUNK"),
    ("export REAL --out FILE", "--out"),
    ("export REAL --out FILE/sub", "--out"),
]


def _argv(line: str, paths: dict[str, Path]) -> list[str]:
    words = []
    for word in shlex.split(line):
        flag, eq, value = word.rpartition("=") if word.startswith("--") else ("", "", word)
        for name in sorted(paths, key=len, reverse=True):  # JUNKDB before JUNK
            if value.startswith(name):
                value = str(paths[name]) + value[len(name) :]
                break
        words.append(flag + eq + value)
    return words


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*")}


@pytest.mark.parametrize(("line", "named"), BAD, ids=[line for line, _ in BAD])
def test_bad_values_exit_2_in_one_line(line, named, paths, capsys):
    before = _snapshot(paths["DIR"].parent)
    with pytest.raises(SystemExit) as exit_:
        main(_argv(line, paths))
    out, err = capsys.readouterr()
    assert exit_.value.code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bubblelab: error: "), err
    assert str(paths.get(named, named)) in lines[0]
    assert "Traceback" not in out + err
    assert _snapshot(paths["DIR"].parent) == before  # nothing written, nothing touched


def test_no_gpu_is_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit):
        main(["run", "--device", "cuda"])
    assert capsys.readouterr().err.splitlines() == [
        "bubblelab: error: --device must be cpu on this machine (no CUDA GPU found), got 'cuda'"
    ]


def test_a_real_process_prints_one_line(paths):
    """The installed entry point, as a shell runs it (the in-process tests call main())."""
    done = subprocess.run(
        [sys.executable, "-m", "bubblelab", "run", "--output-len-mean", "nan"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "bubblelab: error: --output-len-mean must be a finite number in [1, 1000000], got nan"
    ]
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: EngineConfig(max_num_seqs=0),
            "max_num_seqs must be an integer in [1, 1024], got 0",
        ),
        (lambda: EngineConfig(gpu_memory_utilization=float("nan")), "gpu_memory_utilization"),
        (lambda: WorkloadSpec(arrival_rate=0), "arrival_rate must be a finite number in (0, "),
        (lambda: WorkloadSpec(output_len_mean=float("nan")), "output_len_mean must be a finite"),
        (lambda: SweepSpec(repeats=0), "repeats must be an integer in [1, 1000], got 0"),
        (lambda: SweepSpec(streams=[]), "streams takes comma-separated integers"),
    ],
)
def test_the_python_api_refuses_with_the_same_rules(make, message):
    with pytest.raises(OptionError) as e:
        make()
    assert message in str(e.value)
