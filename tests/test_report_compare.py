"""`bubblelab compare A B` (report.diff): two traces or run directories side by side, B - A."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bubblelab.report.diff import compare, figure, foreseen_rows, row_figures
from bubblelab.report.diff_page import render_comparison
from bubblelab.runs.demo import write_demo_run_dir
from bubblelab.runs.traces import TRACES_DIR

D1, D2 = (TRACES_DIR / f"qwen3-0.6b-s1-d{d}.sqlite.gz" for d in (1, 2))


@pytest.fixture(scope="module")
def traces():
    return compare(D1, D2)


def test_two_traces_pair_run_by_run(traces):
    """Depth 1 against depth 2 of one configuration: no configuration and depth in common, so the
    runs pair in order; pipelining takes the bubble and the period down, the forward stays."""
    steps = traces.steps.set_index("metric")
    assert traces.names == (D1.name, D2.name) and steps["pair"].nunique() == 1
    [(pair, run_a, run_b)] = traces.runs
    assert pair == f"{run_a} | {run_b}" and run_a.endswith("depth 1") and run_b.endswith("depth 2")
    assert steps.at["bubble_ms", "b"] < 0.2 * steps.at["bubble_ms", "a"]
    assert steps.at["period_ms", "diff"] < 0
    assert abs(steps.at["forward_ms", "diff_pct"]) < 5
    for table in (traces.steps, traces.attribution, traces.kernels):
        assert (table["diff"] - (table["b"] - table["a"])).abs().max() < 1e-12
    # where the bubble went: the depth-1 bubble is mostly under the forward it waited for
    phases = traces.attribution.set_index("phase")
    assert phases["a"].sum() == pytest.approx(steps.at["bubble_ms", "a"], rel=0.3)
    assert 0 < len(traces.kernels) <= 10 and (traces.kernels["a"] > 0).all()  # both catalogs


def test_two_run_directories_pair_by_configuration(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for d in (one, two):
        write_demo_run_dir(d, streams=(1, 4), requests_per_stream=3, output_len=24)
    result = compare(one, two)
    assert result.steps["pair"].nunique() == 4  # 2 stream counts x 2 depths, matched by name
    assert (
        [a for _, a, _ in result.runs]
        == [b for _, _, b in result.runs]
        == list(result.steps["pair"].unique())
    )
    assert (result.steps["diff"].abs() < 1e-9).all()  # the same simulated runs
    assert result.kernels.empty  # no catalog beside results.json
    page = render_comparison(result)
    assert "<script" not in page and page.count("<table>") == 2
    assert "Kernels need a catalog on both sides" in page


def test_cli_compare_json_and_page(tmp_path):
    page = tmp_path / "compare.html"
    done = subprocess.run(
        [sys.executable, "-m", "bubblelab", "compare", str(D1), str(D2), "--json", "-",
         "--html", str(page)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["schema"], doc["a"], doc["b"]) == (1, D1.name, D2.name)
    assert {r["metric"] for r in doc["steps"]} >= {"bubble_ms", "period_ms", "batch"}
    assert doc["kernels"] and page.read_text().count("<table>") == 3 + 1  # + the forecast check
    assert len(doc["foreseen"]) == 1
    assert "B - A" in done.stderr  # the tables, for people, on stderr while JSON takes stdout
    # one pair: each side's run is said once beside its name, not in every table's title
    [pair] = doc["pairs"]
    said = " ".join(done.stderr.split())  # as the terminal's width wrapped it or not
    assert f"A {D1.name} · {pair['a']}" in said and f"B {D2.name} · {pair['b']}" in said
    assert said.count(pair["a"]) == 1
    assert not re.search(r"\de[+-]\d", done.stderr + page.read_text())  # no 3.087e-05


def test_a_figure_reads_the_same_in_the_terminal_and_on_the_page():
    assert figure(3.087e-05) == "0.000" and figure(-0.6173) == "-0.617"
    assert figure(10534.2) == "10,534" and figure(91.0) == "91"
    assert figure(8.0, signed=True) == "+8" and figure(0.0029, signed=True) == "+0.003"
    assert figure(0.0, signed=True) == "0" and figure(float("nan")) == figure(None) == "–"
    # a row reads alike: tokens/s 1,936 -> 1,460 is -476, not -476.284
    row = {"a": 1936.2, "b": 1459.9, "diff": -476.284}
    assert row_figures(row) == ("1,936", "1,460", "-476")
    row = {"a": 0.4151, "b": None, "diff": None}
    assert row_figures(row) == ("0.415", "–", "–")


def test_the_terminal_shows_the_largest_host_phases_and_counts_the_rest(capsys, monkeypatch):
    """Another engine's trace names dozens of host phases (every CUDA call, every NVTX range): the
    terminal shows the 12 largest on either side and says how many more and how small; --json and
    the page keep every one."""
    from bubblelab.cli import main
    from bubblelab.cli.compare import PHASES_SHOWN

    a, b = (TRACES_DIR / "foreign" / f"{n}.sqlite.gz" for n in ("cupy-decode", "jax-decode"))
    rows = compare(a, b).attribution
    size = rows[["a", "b"]].abs().max(axis=1).fillna(0).sort_values(ascending=False)
    assert len(rows) > PHASES_SHOWN + 2
    monkeypatch.setenv("COLUMNS", "200")
    main(["compare", str(a), str(b)])
    out = capsys.readouterr().out
    table = out[out.index("Bubble by host phase") : out.index("Kernels")]
    shown = [line for line in table.splitlines() if line.startswith("│")]
    assert len(shown) == PHASES_SHOWN
    assert [line.split("│")[1].strip() for line in shown] == [
        rows.loc[i, "phase"] for i in size.index[:PHASES_SHOWN]
    ]
    left = size.iloc[PHASES_SHOWN:]
    assert f"{len(left)} more phases, none over {left.max():.3f} ms a step" in table
    assert re.search(r"tokens_per_s +│ +1,936 │ +1,460 │ +-476 │", out)


def test_a_blocking_trace_against_a_pipelined_one_checks_its_forecast(tmp_path):
    """Our depth-1 and depth-2 traces of one configuration: the step A's trace alone foresees
    (analyze --domain none's T_pipe) set beside B's, both read the same way, in the terminal, the
    JSON and the page; a pair of other configurations says nothing of it."""
    from bubblelab.runs.analysis import blocking_forecast

    d1, d2 = D1, D2
    result = compare(d1, d2)
    (entry,) = result.foreseen
    gain, _ = blocking_forecast(d1)
    measured, _ = blocking_forecast(d2)
    assert entry["pipelined_ms"] == [gain["t_pipe_ms"], measured["t_block_ms"]]
    assert entry["speedup_pct"][0] == gain["speedup_pct"] and entry["sure"]
    # the committed traces (H200): 1.533 foreseen, 1.535 measured; +41.3% against +41.1%, z = 1/L
    # with L = 117.25, the requests' mean generated length (index.json)
    assert entry["z"] == round(1 / 117.25, 6) and entry["z_source"] == "given"
    assert abs(entry["pipelined_ms"][1] / entry["pipelined_ms"][0] - 1) < 0.005
    assert abs(entry["speedup_pct"][1] - entry["speedup_pct"][0]) < 0.5
    rows = foreseen_rows(entry)
    assert rows[1][1].startswith(f"{gain['speedup_pct']:+.1f}% [") and rows[1][3].endswith(" pts")
    page = render_comparison(result)
    assert "A's trace alone foresaw B's step" in page and rows[1][1] in page
    assert "z = 0.0085 from A&#39;s trace: 1/L, L the requests&#39; mean generated length" in page
    assert compare(d1, TRACES_DIR / "qwen3-0.6b-s32-d2.sqlite.gz").foreseen == []
    assert compare(d2, d1).foreseen == []  # B must be the pipelined one
    # what the profiler did to both: the same sweep's unprofiled repeats (index.json), 1.557 and
    # 1.456 ms a step, gained +6.0%, not +41%
    assert entry["unprofiled_ms"] == [1.5567, 1.4564]
    assert round(entry["unprofiled_pct"], 1) == 6.0 and "+6.0% a step" in page
    # the GPU's work a step, which the forecast keeps: 1.511 and 1.515 ms (+0.3%)
    assert entry["gpu_ms"] == [gain["gpu_ms"], measured["gpu_ms"]] and rows[2][0] in page
    assert abs(entry["gpu_ms"][1] / entry["gpu_ms"][0] - 1) < 0.005


def test_a_miss_that_is_the_gpus_shows_in_its_work():
    """qwen3-8b at 128 streams on an H200: at depth 2 the GPU reached its power limit and lowered
    its clock (sweep samples 1965 -> 1808 MHz), so B's step is 1.3% over the forecast and the
    speedup 1.5 points under, outside the interval; the GPU's work a step, 6.069 ms in A and
    6.148 in B, holds all of it (docs/foreign-traces.md)."""
    from bubblelab.runs.analysis import checked_forecast

    pair = Path(__file__).parents[1] / "docs/measurements/2026-12-02/compare-h200/qwen3-8b/traces"
    entry = checked_forecast(*(pair / f"qwen3-8b-s128-d{d}.sqlite.gz" for d in (1, 2)))
    (foreseen, measured), (gpu_a, gpu_b) = entry["pipelined_ms"], entry["gpu_ms"]
    assert entry["sure"] and entry["speedup_pct"][1] < entry["interval_pct"][0] - 0.5
    assert 0.01 < measured / foreseen - 1 < 0.016 and 0.01 < gpu_b / gpu_a - 1 < 0.016
    assert abs((measured - foreseen) - (gpu_b - gpu_a)) < 0.01  # ms: the miss is the GPU's
    assert foreseen_rows(entry)[2][3] == "+1.3%"


def test_without_an_index_the_check_says_nothing_of_the_unprofiled_engine(tmp_path):
    import shutil

    from bubblelab.runs.analysis import checked_forecast

    bare = [tmp_path / p.name for p in (D1, D2)]
    for src, dst in zip((D1, D2), bare, strict=True):
        shutil.copyfile(src, dst)
    checked = checked_forecast(*bare)
    assert checked is not None and "unprofiled_ms" not in checked


def test_a_check_whose_steps_are_not_sure_says_why(capsys, monkeypatch):
    """A forecast whose steps are not sure carries the reason into the JSON, the terminal and the
    page, naming the trace it belongs to (A or B), not a bare ~; the reason is the trace's data,
    printed as it is."""
    import bubblelab.report.diff as diff
    from bubblelab.cli import main
    from bubblelab.runs.analysis import blocking_forecast, checked_forecast

    gain, sure = blocking_forecast(D1)
    assert sure and gain["steps_unsure"] is None and checked_forecast(D1, D2)["unsure"] is None
    why = "not sure of the sync rule's steps: the pause rule finds [b]75[/b] steps"
    found = ({**gain, "steps_unsure": why}, False)
    checked = checked_forecast(D1, D2, found=found)
    assert checked is not None and not checked["sure"] and checked["unsure"] == f"A: {why}"
    monkeypatch.setattr(diff, "checked_forecast", lambda a, b: checked_forecast(a, b, found))
    monkeypatch.setenv("COLUMNS", "400")
    main(["compare", str(D1), str(D2)])
    assert f"~: A: {why}." in " ".join(capsys.readouterr().out.split())  # the caption wraps
    page = " ".join(render_comparison(compare(D1, D2)).split())
    assert f"~: A: {why.replace(chr(39), '&#39;')}." in page


def test_a_sweeps_own_traces_take_the_unprofiled_step_from_its_unprofiled_runs(tmp_path):
    """Traces run-and-profile left in RUN/traces/ have no index.json: the unprofiled step of each
    is the steady period its sweep's unprofiled runs of the same configuration and depth pooled,
    the figure profiler_perturbation tables (qwen3-4b's H200 sweep at 1 stream: 2.639 and 2.484 ms
    a step; the committed 0.6b traces stand in for its run.1 and run.2)."""
    import shutil

    from bubblelab.costmodel.perturbation import profiler_perturbation
    from bubblelab.runs.analysis import checked_forecast
    from bubblelab.runs.rundir import read_results

    sweep = Path(__file__).parents[1] / "docs/measurements/2026-12-02/compare-h200/qwen3-4b"
    run = tmp_path / "run4b"
    (run / "traces").mkdir(parents=True)
    shutil.copy(sweep / "qwen3-4b.results.json.gz", run / "results.json.gz")
    pair = [run / "traces" / f"run.{n}.sqlite.gz" for n in (1, 2)]
    for src, dst in zip((D1, D2), pair, strict=True):
        shutil.copyfile(src, dst)
    results = read_results(run)
    table = profiler_perturbation(results.runs, results.steps)
    plain = table[table["streams"] == 1].sort_values("depth")["period_plain"].tolist()
    entry = checked_forecast(*pair)
    assert entry["unprofiled_ms"] == pytest.approx(plain) and plain[0] == pytest.approx(
        2.6389, 1e-4
    )
    assert entry["unprofiled_pct"] == pytest.approx(
        100 * (plain[0] / plain[1] * (1 - entry["z"]) - 1)
    )
    shutil.copyfile(D2, run / "traces" / "run.9.sqlite.gz")  # no run of the sweep traced it
    assert "unprofiled_ms" not in checked_forecast(pair[0], run / "traces" / "run.9.sqlite.gz")
