"""One CLI grammar (issue #17 item 4): --json [PATH|-] everywhere, list-valued --streams, the same
defaults for the same options, --version, a quick --help, and `run --json` with per-request latency
(item 7)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path

import pytest

from bubblelab.cli import app, json_option_values, main
from bubblelab.cli.run import run
from bubblelab.cli.sweep import run_and_profile
from bubblelab.runs.sweep import SweepSpec
from bubblelab.runs.workload import WorkloadSpec

ROOT = Path(__file__).parents[1]
HEAVY = ("torch", "pandas", "numpy", "duckdb", "matplotlib")


def test_help_imports_nothing_heavy_and_is_quick():
    probe = (
        "import sys, time; t = time.perf_counter(); from bubblelab.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print('@', time.perf_counter() - t, [m for m in {HEAVY!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seconds, heavy = done.stdout.rsplit("@", 1)[1].split(" ", 2)[1:]
    assert heavy.strip() == "[]"  # torch alone took 4 s
    assert float(seconds) < 1.0 or pytest.skip(f"a loaded machine: {seconds} s")
    for command in ("run", "run-and-profile", "analyze", "predict", "report", "demo"):
        assert command in done.stdout


def test_reading_a_trace_needs_no_torch():
    """analyze and report of a trace are for any machine: neither imports the engine's torch
    (analyze paid 1.2-3 s of imports for a workload module it needs only with --streams)."""
    trace = ROOT / "traces" / "foreign" / "cupy-decode.sqlite.gz"
    probe = (
        "import sys; from bubblelab.cli import main\n"
        f"main(['analyze', {str(trace)!r}])\n"
        "print('@', 'torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rsplit("@", 1)[1].strip() == "False"


def test_version(capsys):
    main(["--version"])
    assert capsys.readouterr().out == f"bubblelab {version('bubblelab')}\n"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["analyze", "--json"], ["analyze", "--json=-"]),
        (["analyze", "--json", "-"], ["analyze", "--json", "-"]),
        (
            ["analyze", "--json", "out.json", "t.sqlite"],
            ["analyze", "--json", "out.json", "t.sqlite"],
        ),
        (["analyze", "--json", "--warmup", "1"], ["analyze", "--json=-", "--warmup", "1"]),
        (["run", "--json", "results/out"], ["run", "--json", "results/out"]),
        (["analyze", "--", "--json"], ["analyze", "--", "--json"]),
    ],
)
def test_json_takes_an_optional_value(argv, expected):
    assert json_option_values(argv) == expected


def test_json_never_takes_an_existing_trace_as_its_path(tmp_path):
    trace = tmp_path / "a.sqlite"
    trace.write_bytes(b"")
    assert json_option_values(["analyze", "--json", str(trace)]) == [
        "analyze",
        "--json=-",
        str(trace),
    ]


def _defaults(command) -> dict:
    return {name: p.default.default for name, p in inspect.signature(command).parameters.items()
            if hasattr(p.default, "default")}  # fmt: skip


def test_shared_options_have_one_default_everywhere():
    run_defaults, sweep_defaults = _defaults(run), _defaults(run_and_profile)
    shared = set(run_defaults) & set(sweep_defaults)
    assert {"model", "device", "streams", "max_model_len", "output_len_mean"} <= shared
    # --depth is one idea with one name; its default is what each command is for: run drives the
    # pipelined engine, a sweep compares both depths.
    assert (run_defaults.pop("depth"), sweep_defaults.pop("depth")) == ("2", "1,2")
    for name in shared - {"depth"}:
        assert run_defaults[name] == sweep_defaults[name], name
    # ... and they are the library's.
    spec, workload = SweepSpec(), WorkloadSpec()
    assert sweep_defaults["max_model_len"] == spec.max_model_len
    assert sweep_defaults["streams"] == ",".join(map(str, spec.streams))
    assert sweep_defaults["output_len_mean"] == spec.output_len_mean == workload.output_len_mean
    assert sweep_defaults["prompt_len"] == spec.prompt_len == workload.prompt_len
    assert all(isinstance(c.callback, object) for c in app.registered_commands)


def test_run_json_to_stdout_has_latency_per_request_and_runs_per_streams_value(capsys):
    started = time.perf_counter_ns()
    main(
        ["run", "--model", "tiny-llama", "--streams", "1,3", "--output-len-mean", "6",
         "--output-len-dist", "fixed", "--max-model-len", "64", "--json"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    doc = json.loads(out)  # stdout is the JSON alone; tables and progress went to stderr
    assert "tokens/s" in err
    assert [r["summary"]["streams"] for r in doc["runs"]] == [1, 3]
    for r in doc["runs"]:
        assert len(r["requests"]) == 4 * r["summary"]["streams"]
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            stats = r["latency"][key]
            assert 0 < stats["median"] <= stats["p99"], key
        for req in r["requests"].values():
            assert len(req["token_ids"]) == 6 and req["finish_reason"] == "length"
            assert 0 < req["ttft_ms"] <= req["e2e_ms"] < (time.perf_counter_ns() - started) / 1e6
            assert req["tpot_ms"] == pytest.approx((req["e2e_ms"] - req["ttft_ms"]) / 5)


def test_run_takes_a_list_of_depths_as_the_sweep_does(capsys):
    """`--depth 1,2`: each workload at depth 1, then at depth 2, on one engine; the same tokens
    (depth changes when a step's work is launched, never what it computes)."""
    main(
        ["run", "--model", "tiny-llama", "--streams", "1,2", "--depth", "1,2",
         "--output-len-mean", "6", "--max-model-len", "64", "--json"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    runs = json.loads(out)["runs"]
    said = " ".join(err.split())  # the tables, on stderr, end with the depths side by side
    assert "Against depth 1, one run each" in said and "run-and-profile repeats and pairs" in said
    rows = [line.split("│")[1:-1] for line in err.splitlines() if line.count("│") == 7]
    assert [[c.strip() for c in r[:2]] + [r[-1].strip()] for r in rows] == [
        ["1", "1", "–"], ["1", "2", "yes"], ["2", "1", "–"], ["2", "2", "yes"]
    ]  # fmt: skip
    assert [(r["summary"]["streams"], r["summary"]["depth"]) for r in runs] == [
        (1, 1), (1, 2), (2, 1), (2, 2)
    ]  # fmt: skip
    for blocking, pipelined in (runs[:2], runs[2:]):
        tokens = [
            {k: v["token_ids"] for k, v in r["requests"].items()} for r in (blocking, pipelined)
        ]
        assert tokens[0] == tokens[1]
    with pytest.raises(SystemExit):
        main(["run", "--model", "tiny-llama", "--depth", "1,3"])
    assert "--depth takes comma-separated integers in [1, 2], got '1,3'" in capsys.readouterr().err


def test_json_after_a_command_without_inputs_is_always_its_path(tmp_path, capsys):
    """`run` takes no inputs, so `run --json DIR` names the output (and is refused as a directory
    before any work), not a stray argument; analyze reads trace files: a directory is its PATH."""
    assert json_option_values(["run", "--json", str(tmp_path)]) == ["run", "--json", str(tmp_path)]
    assert json_option_values(["analyze", "--json", str(tmp_path), "t.sqlite"])[1:3] == [
        "--json",
        str(tmp_path),
    ]
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--json", str(tmp_path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"bubblelab: error: --json {tmp_path} is a directory; give a file name\n"
    )


def test_no_arguments_print_the_help_once(capsys):
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2
    assert capsys.readouterr().out.count("Usage:") == 1


def test_ctrl_c_says_interrupted(monkeypatch, capsys):
    """typer turns a KeyboardInterrupt into a silent exit status 130: the user gets the line."""
    import bubblelab.cli.run as run_module

    def interrupted(dest):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "check_json_dest", interrupted)
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--model", "tiny-llama"])
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "bubblelab: error: interrupted\n"


# Ideas several commands take, and every spelling one might give them: one spelling each is shown.
IDEAS = {
    "pipeline depth": ("--depth", "--depths"),
    "requests": ("--requests-per-stream", "--requests"),
    "mean generated length L": ("--output-len-mean", "--output-len"),
    "output folder or page": ("--out", "--output", "--out-dir"),
    "bootstrap resamples": ("--n-boot", "--bootstrap"),
    "JSON output": ("--json", "--json-out"),
    "replace an existing run": ("--force", "--overwrite"),
}


def _commands() -> Mapping:
    import typer.core
    import typer.main

    from bubblelab.cli import _register_all

    _register_all()
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return group.commands


def test_one_name_per_idea_in_every_command():
    shown = {
        name: {o for p in command.params if not getattr(p, "hidden", False) for o in p.opts}
        for name, command in _commands().items()
    }
    for idea, spellings in IDEAS.items():
        used = {o for opts in shown.values() for o in opts if o in spellings}
        assert len(used) <= 1, f"{idea}: {sorted(used)}"
    # ... and one option name (the parameter) is spelt one way everywhere.
    spelt: dict[str, set[str]] = {}
    for command in _commands().values():
        for p in command.params:
            if p.opts[0].startswith("--"):
                spelt.setdefault(str(p.name), set()).add(p.opts[0])
    assert {n: s for n, s in spelt.items() if len(s) > 1} == {}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["analyze", "--output-len", "0", "x.sqlite"], "--output-len-mean"),
        (["analyze", "--output-len=0", "x.sqlite"], "--output-len-mean"),
        (["run-and-profile", "--depths", "3"], "--depth"),
    ],
)
def test_old_spellings_still_work_and_the_error_names_the_new(old, new, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(old)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bubblelab: error: {new} "), err


def test_run_counts_requests_per_stream_as_run_and_profile_does(monkeypatch):
    from bubblelab.runs import plain

    planned = []
    monkeypatch.setattr(plain, "run_plan", lambda plan, **_: planned.append(plan) or [])
    monkeypatch.setattr("bubblelab.engine.llm_engine.LLMEngine.__init__", lambda self, c: None)
    monkeypatch.setattr("bubblelab.engine.llm_engine.LLMEngine.close", lambda self: None)
    main(["run", "--model", "tiny-llama", "--streams", "1,3", "--requests-per-stream", "2"])
    assert [w.requests for w in planned[0].workloads] == [2, 6]


def test_help_reads_as_sentences():
    """Each command's summary is one whole sentence on its line, every paragraph is one line the
    terminal wraps (no stranded words); flags show no value."""
    for name, command in _commands().items():
        summary = (command.help or "").split("\n\n")[0]
        assert "\n" not in summary.strip() and summary.strip().endswith("."), name
        assert all("\n" not in p for p in (command.help or "").split("\n\n")), name
        for p in command.params:
            if getattr(p, "is_flag", False):
                assert p.metavar == "", f"{name} {p.opts[0]}"


def test_a_help_paragraph_wraps_at_the_terminal_not_at_the_source(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    main(["analyze", "--help"])
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert (
        "Also the steps found, and for a foreign engine its host syncs and what pipelining would "
        "buy it." in lines
    )


@pytest.mark.parametrize("argv", [[], ["analyze"], ["run-and-profile"]])
def test_dash_h_is_help(argv, capsys):
    main([*argv, "-h"])
    short = capsys.readouterr().out
    main([*argv, "--help"])
    assert short == capsys.readouterr().out and "Usage: bubblelab" in short


@pytest.mark.parametrize("argv", [[], ["compare"], ["run"]])
def test_help_is_shown_as_a_flag_without_a_value(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    main([*argv, "--help"])
    line = next(x for x in capsys.readouterr().out.splitlines() if "--help" in x)
    assert "<bool>" not in line and line.split("--help")[1].split()[:2] == ["-h", "Show"]


def test_arguments_are_named_in_capitals_as_their_help_and_errors_say():
    """compare's help said "set against A" of an argument listed as `a`; usage errors name it."""
    for name, command in _commands().items():
        for p in command.params:
            if p.param_type_name == "argument":
                assert p.display_name_raw.isupper(), f"{name} {p.display_name_raw}"


def test_an_option_a_rule_names_is_written_as_its_flag(capsys):
    """A library rule that names another option says it as typed: `--max-model-len`, not
    `max_model_len`; a plain word that is also an option's name (`streams`) stays a word."""
    with pytest.raises(SystemExit):
        main(["run", "--max-model-len", "8"])
    assert capsys.readouterr().err.strip() == (
        "bubblelab: error: --prompt-len must be < --max-model-len (8), got 32"
    )
    from bubblelab.cli import as_flags

    assert as_flags("max_model_len - prompt_len, not_an_option, streams") == (
        "--max-model-len - --prompt-len, not_an_option, streams"
    )


@pytest.mark.parametrize(
    "argv, said",
    [
        (["run", "--seed", "abc"], "--seed takes an integer, got 'abc'"),
        (["run", "--temperature=hot"], "--temperature takes a number, got 'hot'"),
        (["run", "--seed", "1", "--seed", "x"], "--seed takes an integer, got 'x'"),
        (["analyze", "t.sqlite", "--streams", "1,8"], "--streams takes an integer, got '1,8'"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_with_the_value(argv, said, capsys):
    """As every other refusal: the flag, what it takes, what it got (typer's own words named
    neither the value nor, plainly, the option)."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert capsys.readouterr().err.strip() == f"bubblelab: error: {said}"
