"""The nsys driver, against a fake `nsys` script that records the argument list it was given."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.profiling import nsys

FAKE_NSYS = f"""#!{sys.executable}
import json, pathlib, sys
args = sys.argv[1:]
pathlib.Path(__file__).with_name("argv.json").write_text(json.dumps(args))
if args == ["--version"]:
    print("NVIDIA Nsight Systems version 2025.3.2.474-253236389321v0")
elif "fail" in args:
    print("some detail", file=sys.stderr)
    print("Error: the application crashed", file=sys.stderr)
    sys.exit(3)
elif "workerdies" in args:  # the profiled command fails, then nsys says its own last line
    print("Traceback (most recent call last):")
    print("bubblelab.core.errors.BubblelabError: grammar 'point' does not compile")
    print("No reports were generated")
    sys.exit(1)
elif "ranges" in args:  # --capture-range-end=repeat: a report per range, numbered if several
    out, n = args[args.index("-o") + 1], int(args[-1])
    for name in [out] if n == 1 else [out + "." + str(i) for i in range(1, n + 1)]:
        pathlib.Path(name + ".nsys-rep").write_text("report")
        pathlib.Path(name + ".sqlite").write_text("export")
elif "nocapture" not in args:
    out = args[args.index("-o") + 1]
    pathlib.Path(out + ".sqlite").write_text("export")
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "my tools 'v2'" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "nsys"
    script.write_text(FAKE_NSYS)
    script.chmod(0o755)
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return script


def recorded(fake: Path) -> list[str]:
    return json.loads(fake.with_name("argv.json").read_text())


def test_profile_command_shape(fake_nsys, tmp_path):
    cmd = nsys.profile_command(
        tmp_path / "out", ["python", "-m", "bubblelab._worker", "--depth", "2"]
    )
    assert cmd == [
        str(fake_nsys),
        "profile",
        "-t",
        "cuda,nvtx",
        "-s",
        "none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--export",
        "sqlite",
        "-o",
        str(tmp_path / "out"),
        "--force-overwrite",
        "true",
        "python",
        "-m",
        "bubblelab._worker",
        "--depth",
        "2",
    ]


def test_paths_with_spaces_and_quotes_reach_nsys_verbatim(fake_nsys, tmp_path):
    out_base = tmp_path / 'runs "quoted" dir' / "d2 s8 it's.v1"
    argv = [
        sys.executable,
        "-m",
        "bubblelab._worker",
        "--out",
        str(tmp_path / "a b'c\"d"),
        "$HOME;rm -rf x",
    ]
    trace = nsys.run_under_nsys(out_base, argv)
    assert trace == out_base.parent / "d2 s8 it's.v1.sqlite" and trace.read_text() == "export"
    assert recorded(fake_nsys)[-len(argv) :] == argv  # no shell: nothing split, expanded or run
    assert recorded(fake_nsys)[recorded(fake_nsys).index("-o") + 1] == str(out_base)


def test_version_and_env_override(fake_nsys, tmp_path, monkeypatch):
    assert nsys.nsys_version() == "2025.3.2.474"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("NSYS", str(fake_nsys))
    assert nsys.find_nsys() == str(fake_nsys)
    monkeypatch.setenv("NSYS", str(tmp_path / "nope"))
    with pytest.raises(BubblelabError, match=r"\$NSYS=.*nope is not an executable"):
        nsys.find_nsys()


def test_failures_are_one_line_errors(fake_nsys, tmp_path, monkeypatch):
    with pytest.raises(
        BubblelabError, match="nsys profile exited with 3: Error: the application crashed"
    ):
        nsys.run_under_nsys(tmp_path / "o", ["fail"])
    with pytest.raises(
        BubblelabError, match=r"wrote no o\.sqlite: did the run call torch\.cuda\.profiler"
    ):
        nsys.run_under_nsys(tmp_path / "o", ["nocapture"])
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BubblelabError, match="nsys .* not found"):
        nsys.profile_command(tmp_path / "o", ["x"])


def test_a_failed_session_names_the_commands_error_and_keeps_its_output(fake_nsys, tmp_path):
    """nsys's last line ("No reports were generated") hides why: the profiled command's own error
    line is named, and the whole output kept in the log."""
    log = tmp_path / "nsys.log"
    ranges = nsys.start_ranges(tmp_path / "o", ["workerdies"])
    with pytest.raises(BubblelabError) as e:
        nsys.finish_ranges(ranges, log=log)
    assert "grammar 'point' does not compile; then No reports were generated" in str(e.value)
    assert str(log) in str(e.value) and "Traceback" in log.read_text()


@pytest.mark.parametrize(
    ("ranges", "names"), [(1, ["o.sqlite"]), (2, ["o.1.sqlite", "o.2.sqlite"])]
)
def test_a_session_of_one_range_or_several_gives_its_exports_in_order(
    fake_nsys, tmp_path, ranges, names
):
    """nsys numbers its reports only when the session had several ranges (a sweep's nsys pass is
    one range: runs.passes)."""
    found = nsys.finish_ranges(nsys.start_ranges(tmp_path / "o", ["ranges", str(ranges)]))
    assert [p.name for p in found] == names


# -- how CUDA graphs are traced: node (their kernels) or graph (whole replays, light) --------------
def test_graph_trace_mode_is_a_parameter(fake_nsys, tmp_path):
    assert "--cuda-graph-trace=node" in nsys.profile_command(tmp_path / "o", ["x"])
    cmd = nsys.profile_command(tmp_path / "o", ["x"], "repeat", graph_trace="graph")
    assert [o for o in cmd if o.startswith("--c")] == [
        "--cpuctxsw=none",
        "--cuda-graph-trace=graph",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=repeat",
    ]
    nsys.run_under_nsys(tmp_path / "g", ["python", "x"], graph_trace="graph")
    assert "--cuda-graph-trace=graph" in recorded(fake_nsys)
    with pytest.raises(BubblelabError, match="cuda_graph_trace must be one of node, graph"):
        nsys.profile_command(tmp_path / "o", ["x"], graph_trace="kernels")


def test_the_sweep_option_reaches_the_nsys_command_line(fake_nsys, tmp_path, monkeypatch):
    """SweepSpec.cuda_graph_trace goes to the nsys pass's command line and into the sweep's
    recorded options (the results' provenance["sweep"])."""
    from bubblelab.runs import passes
    from bubblelab.runs.state import SPEC_FILE
    from bubblelab.runs.sweep import SweepSpec, run_sweep

    seen = {}

    def start_ranges(out_base, argv, *, env=None, graph_trace="node"):
        seen["cmd"] = nsys.profile_command(out_base, argv, "repeat", graph_trace)
        seen["spec"] = json.loads((Path(out_base).parents[1] / SPEC_FILE).read_text())
        raise BubblelabError("stopped here")

    monkeypatch.setattr(passes, "start_ranges", start_ranges)
    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=4, requests_per_stream=2,
                     prompt_len=4, repeats=1, cuda_graph_trace="graph")  # fmt: skip
    with pytest.raises(BubblelabError, match="stopped here"):
        run_sweep(spec, tmp_path / "sweep", use_nsys=True, say=lambda _: None)
    assert "--cuda-graph-trace=graph" in seen["cmd"]
    assert seen["spec"]["cuda_graph_trace"] == "graph"
    with pytest.raises(BubblelabError, match="cuda_graph_trace must be one of node, graph"):
        SweepSpec(model="tiny-llama", cuda_graph_trace="nodes")


def test_run_and_profile_takes_the_graph_trace_mode(tmp_path, monkeypatch):
    from bubblelab.cli import main
    from bubblelab.cli import sweep as cli_sweep

    given = {}
    monkeypatch.setattr(cli_sweep, "profile_and_report", lambda spec, *a, **k: given.update(s=spec))
    main(["run-and-profile", "--model", "tiny-llama", "--out", str(tmp_path / "r"),
          "--cuda-graph-trace", "graph"])  # fmt: skip
    assert given["s"].cuda_graph_trace == "graph"
    main(["run-and-profile", "--model", "tiny-llama", "--out", str(tmp_path / "r")])
    assert given["s"].cuda_graph_trace == "node"  # the default: the kernels inside graphs seen
