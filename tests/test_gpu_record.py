"""GPU test runs are recorded as machine-readable results (issue #14 item 6), and the CPU suite
names the last one."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

from tests.gpu_record import ROOT, last_gpu_run, read_gpu_run


def test_the_last_gpu_run_is_recorded_with_gpu_commit_and_date():
    run = last_gpu_run()
    assert run is not None, "no docs/measurements/*/gpu-tests.xml"
    assert run.gpu and run.commit and run.tests > 0
    assert dt.datetime.fromisoformat(run.date.replace("Z", "+00:00")).year >= 2026
    assert run.path.parent.name == run.date[:10]  # filed under its own date
    assert run.failures == run.errors == 0  # a record of failing GPU tests is not a pass
    assert run.passed > 0


def test_a_record_with_properties_reads_the_same(tmp_path):
    xml = tmp_path / "gpu-tests.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest" tests="3" failures="1" errors="0" skipped="1">'
        '<properties><property name="gpu" value="NVIDIA H200"/>'
        '<property name="commit" value="abc1234"/>'
        '<property name="date" value="2026-12-01T10:00:00Z"/></properties>'
        "</testsuite></testsuites>"
    )
    run = read_gpu_run(xml)
    assert (run.gpu, run.commit, run.passed, run.failures) == ("NVIDIA H200", "abc1234", 1, 1)


def test_the_cpu_suite_names_the_last_gpu_run():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "tests/test_gpu_record.py"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    run = last_gpu_run()
    assert run is not None and run.summary() in done.stdout
