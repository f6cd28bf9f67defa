"""The figures leave matplotlib's global state alone (a user's notebook keeps its backend and
styles), keep their legends short, and the machine facts a sweep records are real."""

import subprocess
import sys

import numpy as np

from bubblelab.report import figures
from bubblelab.runs.machine import CHECKOUT, cpu_facts, git_facts, machine_facts

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


def test_machine_facts_are_best_effort(tmp_path):
    assert git_facts(tmp_path) == {"git_revision": None, "git_dirty": None}
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Example CPU @ 3.00GHz\ncpu MHz\t\t: 2999.5\n")
    facts = cpu_facts(cpuinfo)
    assert facts["cpu_model"] == "Example CPU @ 3.00GHz" and facts["cpu_mhz"] == 2999.5
