"""No network, ever (issue #14 item 5): DuckDB may not download extensions, and the CLI works with
networking disabled (a network namespace where the system allows one, always a socket guard and an
unroutable proxy)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bubblelab.profiling.catalog import connect
from bubblelab.runs.demo import write_demo_run_dir
from tests.profiling_trace_builder import blocking_trace, pipelined_trace

ROOT = Path(__file__).parents[1]
GUARD = """
import socket

def _refuse(*args, **kwargs):
    raise OSError("bubblelab test: the network is disabled")

socket.socket.connect = socket.socket.connect_ex = _refuse
socket.create_connection = socket.getaddrinfo = _refuse
"""


def test_duckdb_never_autoloads_or_autoinstalls():
    con = connect(None)
    settings = con.execute(
        "SELECT current_setting('autoload_known_extensions'), "
        "current_setting('autoinstall_known_extensions')"
    ).fetchone()
    assert settings == (False, False)


def test_every_duckdb_connection_is_offline():
    """A connection opened without profiling.catalog.OFFLINE may download an extension: every
    duckdb.connect in the product, the benchmarks and the tools passes it (or goes through
    profiling.catalog.connect)."""
    offenders = []
    for folder in ("bubblelab", "engine", "profiling", "costmodel", "benchmarks", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for call in re.finditer(r"duckdb\.connect\(", text):
                if "config=OFFLINE" not in _call_args(text, call.end()):
                    line = text.count("\n", 0, call.start()) + 1
                    offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offenders, "duckdb.connect without config=OFFLINE: " + ", ".join(offenders)


def _call_args(text: str, start: int) -> str:
    """The text of a call's arguments, from just after its opening parenthesis."""
    depth = 1
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            return text[start:end]
    return text[start:]


def _offline() -> list[str]:
    """A prefix that runs a command without any network interface, where the system allows it."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []


@pytest.fixture(scope="module")
def offline_env(tmp_path_factory) -> dict[str, str]:
    guard = tmp_path_factory.mktemp("guard")
    (guard / "sitecustomize.py").write_text(GUARD)
    proxy = "http://10.255.255.1:9"  # unroutable
    return {
        **os.environ,
        "PYTHONPATH": str(guard),
        "HOME": str(guard),  # no ~/.duckdb extensions to fall back on
        **{k: proxy for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")},
        "COLUMNS": "120",
    }


def bubblelab_offline(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_offline(), sys.executable, "-m", "bubblelab", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )


def test_the_cli_works_with_the_network_disabled(offline_env, tmp_path):
    probe = subprocess.run(
        [
            *_offline(),
            sys.executable,
            "-c",
            "import socket; socket.create_connection(('1.1.1.1', 80))",
        ],
        capture_output=True,
        text=True,
        env=offline_env,
    )
    assert probe.returncode != 0  # the guard holds
    traces = [blocking_trace(tmp_path / "d1.sqlite"), pipelined_trace(tmp_path / "d2.sqlite")]
    catalog = tmp_path / "catalog.duckdb"
    done = bubblelab_offline(
        offline_env, "analyze", *map(str, traces), "--warmup", "1", "--catalog", str(catalog)
    )
    assert done.returncode == 0, done.stderr
    assert "Steady-state steps" in done.stdout
    # A trace given as the catalog: DuckDB reached for its sqlite extension over HTTP here.
    done = bubblelab_offline(offline_env, "analyze", "--catalog", str(traces[0]))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"bubblelab: error: {traces[0]} is an SQLite file (an nsys export?), not a DuckDB "
        "catalog: pass it as a trace"
    ]
    run_dir = write_demo_run_dir(tmp_path / "demo", streams=(1,), requests_per_stream=2).parent
    done = bubblelab_offline(offline_env, "report", str(run_dir), "--n-boot", "20")
    assert done.returncode == 0, done.stderr
    done = bubblelab_offline(offline_env, "predict", "--catalog", str(catalog), "--json")
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr
