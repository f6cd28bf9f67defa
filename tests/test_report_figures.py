"""The figures leave matplotlib's global state alone (a user's notebook keeps its backend and
styles), keep their legends short, and the machine facts a sweep records are real."""

import subprocess
import sys

import numpy as np

from bubblelab.report import figures
from bubblelab.runs.machine import (
    CHECKOUT,
    cpu_facts,
    git_facts,
    machine_facts,
    revision_label,
)

UNTOUCHED = """
import matplotlib
matplotlib.use("svg")  # the user's choice, made before importing bubblelab
matplotlib.rcParams["font.size"] = 13.0
before = (matplotlib.get_backend(), dict(matplotlib.rcParams))
import numpy as np
import matplotlib.pyplot as plt
from bubblelab.report import figures
from bubblelab.report.report import render_report
svg = figures.gap_histogram([("a", 1, np.array([0.001, 0.3])), ("a", 2, np.array([0.001]))])
assert svg.startswith("<svg")
assert (matplotlib.get_backend(), dict(matplotlib.rcParams)) == before
# A whole report: every figure it draws.
import sys, tempfile
from pathlib import Path
from bubblelab.report.report import report_run_dir
from bubblelab.runs.demo import write_demo_run_dir
run_dir = Path(tempfile.mkdtemp()) / "demo"
write_demo_run_dir(run_dir, streams=(1, 2), requests_per_stream=2, output_len=16)
assert report_run_dir(run_dir, n_boot=20).read_text().count("<svg") >= 6
assert (matplotlib.get_backend(), dict(matplotlib.rcParams)) == before
assert plt.get_fignums() == []  # no figure left open in pyplot
print("untouched")
"""


def test_figures_leave_matplotlib_state_alone():
    done = subprocess.run(
        [sys.executable, "-c", UNTOUCHED], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "untouched"


def test_gap_histogram_has_one_legend_of_two_depths():
    gaps = [
        (f"config {c}", depth, np.random.default_rng(c).lognormal(-5, 2, 200))
        for c in range(18)
        for depth in (1, 2)
    ]
    svg = figures.gap_histogram(gaps)
    assert svg.count("-legend_1") == 1 and "-legend_2" not in svg
    legend = svg[svg.index("-legend_1") :]
    assert legend.count("-text_") == 2  # "depth 1 (blocking)", "depth 2 (pipelined)"


def test_machine_facts_are_this_machine():
    facts = machine_facts()
    head = subprocess.run(
        ["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    assert facts["git_revision"] == head.stdout.strip()
    assert isinstance(facts["git_dirty"], bool)
    assert facts["cpu_model"] and facts["cpu_count"] >= 1
    assert isinstance(facts["gpus"], list)


def test_a_stamped_copy_says_when_its_files_are_not_the_revision_it_names(tmp_path):
    """stamp_rev.sh writes the revision and its files' blobs; a file edited after it marks the
    records `+modified`, and the recorded data that slim_checkout.sh sets aside does not."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    git("init", "-q")
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "pdl.py").write_text('EARLY_KINDS = {"attention"}\n')
    (tmp_path / "docs" / "measurements").mkdir(parents=True)
    (tmp_path / "docs" / "measurements" / "big.json").write_text("{}")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    script = CHECKOUT / "tools" / "gpu_machine" / "stamp_rev.sh"
    subprocess.run(["bash", str(script)], cwd=tmp_path, check=True)
    head = git("rev-parse", "--short", "HEAD")
    assert (tmp_path / ".git-rev").read_text().splitlines()[1:] == [
        f"{git('hash-object', 'engine/pdl.py')} engine/pdl.py"
    ]
    (tmp_path / "docs" / "measurements" / "big.json").unlink()  # set aside: still the revision
    assert git_facts(tmp_path) == {"git_revision": head, "git_dirty": False}
    assert revision_label(tmp_path) == head
    (tmp_path / "engine" / "pdl.py").write_text('EARLY_KINDS = {"attention", "norm"}\n')
    assert git_facts(tmp_path)["git_dirty"] is True
    assert revision_label(tmp_path) == f"{head}+modified"
    (tmp_path / "engine" / "pdl.py").unlink()  # a file gone is a change too
    assert revision_label(tmp_path) == f"{head}+modified"


def test_machine_facts_are_best_effort(tmp_path):
    assert git_facts(tmp_path) == {"git_revision": None, "git_dirty": None}
    # A copied tree names its revision in .git-rev, over whatever .git the copy has.
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git-rev").write_text("9823259\n")
    assert git_facts(tmp_path) == {"git_revision": "9823259", "git_dirty": None}
    (tmp_path / ".git-rev").unlink()
    (tmp_path / ".git").rmdir()
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Example CPU @ 3.00GHz\ncpu MHz\t\t: 2999.5\n")
    facts = cpu_facts(cpuinfo)
    assert facts["cpu_model"] == "Example CPU @ 3.00GHz" and facts["cpu_mhz"] == 2999.5


def _texts_overlap(fig) -> list[tuple[str, str]]:
    """Pairs of visible titles whose drawn boxes overlap (rendered with Agg, as laid out)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    titles = [
        t
        for ax in fig.axes
        if ax.get_visible()
        for t in (ax.title, ax._left_title, ax._right_title)
        if t.get_text()
    ]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in titles]
    return [
        (a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1 :] if ba.overlaps(bb)
    ]


def test_idle_gap_panel_titles_never_run_together():
    """The committed H200 report's panel titles ran into each other: long configuration names
    now wrap to their panel's width."""
    import matplotlib

    from bubblelab.report.figures.steps import gap_histogram
    from bubblelab.report.figures.style import STYLE

    names = [
        f"qwen3-{m} · NVIDIA H200 · {s} streams · grammar detect"
        for m, s in (("0.6b", 128), ("1.7b", 64), ("4b", 32), ("8b", 8), ("14b", 1))
    ]
    gaps = [(n, d, np.random.default_rng(0).random(40)) for n in names for d in (1, 2)]
    with matplotlib.rc_context(STYLE):
        assert _texts_overlap(gap_histogram.__wrapped__(gaps)) == []


def test_step_series_draws_every_step_and_marks_prefills():
    import matplotlib

    from bubblelab.report.example import RUN_DIR
    from bubblelab.report.figures.series import step_series
    from bubblelab.report.figures.style import STYLE
    from bubblelab.runs.rundir import read_results

    r = read_results(RUN_DIR)
    runs = r.runs[r.runs["streams"] == 32]
    panels = [
        (f"depth {d}", r.steps[r.steps["run_id"] == run_id])
        for run_id, d in zip(runs["run_id"], runs["depth"], strict=True)
    ]
    with matplotlib.rc_context(STYLE):
        fig = step_series.__wrapped__(panels)
    assert _texts_overlap(fig) == []
    ax = fig.axes[0]
    period, bubble, prefills = ax.lines
    steps = panels[0][1]
    assert len(period.get_xdata()) == len(steps)  # every step, not a steady window
    assert list(prefills.get_xdata()) == sorted(steps.loc[steps["kind"] == "prefill", "step"])
    assert len(prefills.get_xdata()) > 0
    assert figures.step_series(panels).startswith("<svg")


def test_a_legend_of_many_host_activities_leaves_the_panels_their_room():
    """Another engine's trace names dozens of host activities (cuda: memcpy HtoD, os: sem_wait):
    the legend's rows go above panels of their usual height, with no tight_layout warning."""
    import warnings

    import pandas as pd

    phases = [f"cuda: call {i}" for i in range(30)] + ["untraced host code", "os: sem_wait"]
    rows = [
        {"config": c, "depth": d, "phase": p, "time_ms": 0.1, "began_ms": 0.1}
        for c in ("nanovllm-tp2",)
        for d in (0,)
        for p in phases
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        svg = figures.attribution_bars(pd.DataFrame(rows))
    assert "<svg" in svg
