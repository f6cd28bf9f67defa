"""The report in a real browser: headless Chromium, driven over the DevTools protocol on a pipe.

Checks that the page renders at 1400 px wide, logs no console error, raises no exception, opens no
dialog (a planted `<script>alert(1)</script>` would), paints a non-blank screenshot and draws no
figure text over other text.
"""

import base64
import fcntl
import io
import json
import os
import select
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from bubblelab.costmodel.simulate import LoopCosts
from bubblelab.report.report import report_dirs, report_run_dir
from bubblelab.runs.demo import write_demo_run_dir
from tests.test_report import EVIL, plant

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1400  # px: a laptop's browser window
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)


def _onto_3_and_4(read_fd: int, write_fd: int) -> None:
    """In the child: the pipe ends become fds 3 and 4 (moved above 10 first, so neither clobbers the
    other)."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (read_fd, write_fd)]
    os.dup2(high[0], 3)
    os.dup2(high[1], 4)


class Browser:
    """Chromium with --remote-debugging-pipe: JSON messages ending in NUL, commands on fd 3, replies
    on fd 4."""

    def __init__(self, user_data_dir):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={user_data_dir}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: _onto_3_and_4(to_chrome_r, from_chrome_w),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer, self._next_id, self.events = b"", 0, []

    def _read(self, timeout: float) -> dict | None:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_chrome], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(
        self,
        method: str,
        params: dict | None = None,
        session: str | None = None,
        timeout: float = 30,
    ):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while (reply := self._read(max(0.0, deadline - time.monotonic()))) is not None:
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._on_event(reply)
        raise TimeoutError(method)

    def _on_event(self, event: dict) -> None:
        self.events.append(event)
        if event.get("method") == "Page.javascriptDialogOpening":  # don't hang on alert()
            self.send("Page.handleJavaScriptDialog", {"accept": True}, event.get("sessionId"))

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while (event := self._read(max(0.0, deadline - time.monotonic()))) is not None:
            self._on_event(event)
            if event.get("method") == method:
                return event
        raise TimeoutError(method)

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (event := self._read(max(0.0, deadline - time.monotonic()))) is not None:
            self._on_event(event)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def load(
    url: str, user_data_dir, width: int = WIDTH, measure: dict[str, str] | None = None
) -> dict:
    """Open url; return its problems (console errors, exceptions, dialogs), text, a screenshot and
    the value of each JavaScript expression in `measure`, by name."""
    browser = Browser(user_data_dir)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            browser.send(f"{domain}.enable", session=session)
        browser.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        browser.send("Page.navigate", {"url": url}, session)
        browser.wait_for("Page.loadEventFired")
        browser.drain(0.5)  # late console messages and CSP reports
        text = browser.send(
            "Runtime.evaluate",
            {"expression": "document.body.innerText", "returnByValue": True},
            session,
        )["result"]["value"]
        scripts = browser.send(
            "Runtime.evaluate",
            {"expression": "document.scripts.length", "returnByValue": True},
            session,
        )["result"]["value"]
        values = {
            name: browser.send(
                "Runtime.evaluate", {"expression": js, "returnByValue": True}, session
            )["result"]["value"]
            for name, js in (measure or {}).items()
        }
        shot = browser.send(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session
        )
    finally:
        browser.close()
    problems = []
    for e in browser.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert", "warning"):
            problems.append(
                ("console", " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            )
        elif m == "Runtime.exceptionThrown":
            problems.append(("exception", p["exceptionDetails"].get("text")))
        elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            problems.append(("log", p["entry"]["text"]))
        elif m == "Page.javascriptDialogOpening":
            problems.append(("dialog", p["message"]))
    return {
        "problems": problems,
        "text": text,
        "scripts": scripts,
        "png": base64.b64decode(shot["data"]),
        **values,
    }


def assert_not_blank(png: bytes, path) -> None:
    path.write_bytes(png)
    pixels = mpimg.imread(io.BytesIO(png), format="png")[..., :3]
    assert pixels.shape[0] > 2000 and pixels.shape[1] == WIDTH  # the whole long page
    colors = np.unique((pixels[::4, ::4] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colors) > 200  # text, charts, the hero gradient
    assert pixels.std() > 0.05


def test_harness_sees_a_script_that_runs(tmp_path):
    """Control: the same harness does catch a dialog and a console error when a page runs a
    script."""
    page = tmp_path / "bad.html"
    page.write_text(f"<!doctype html><p>x</p>{EVIL}<script>console.error('boom')</script>")
    result = load(page.as_uri(), tmp_path / "profile")
    kinds = {k for k, _ in result["problems"]}
    assert {"dialog", "console"} <= kinds


def test_report_renders_cleanly(tmp_path):
    run_dir = tmp_path / "run"
    write_demo_run_dir(
        run_dir, streams=(1, 8), requests_per_stream=3, output_len=32, costs=LoopCosts(fwd_base=1.0)
    )
    report = report_run_dir(run_dir, n_boot=100)
    measure = {"links": LINKS, "overlaps": OVERLAPS, "wide": WIDE}
    result = load(report.as_uri(), tmp_path / "profile", measure=measure)
    assert result["problems"] == []
    assert result["overlaps"] == []
    assert result["wide"] == []  # the prediction table once ran 12 columns past its card
    assert "Prediction vs measurement" in result["text"] and "Provenance" in result["text"]
    assert_not_blank(result["png"], tmp_path / "report.png")
    # The data section links the trace and the four tables, and each link opens a file beside it.
    assert len(result["links"]) == 5
    for href in result["links"]:
        assert href.startswith("file://") and Path(urllib.parse.unquote(href[7:])).is_file()


# What the page shows, measured in the browser: rows per table, legend entries per figure, how large
# each figure is drawn against its own size (below 1 its 9-pt text shrinks), the folds.
ROWS = """Object.fromEntries(Array.from(document.querySelectorAll("section.card")).map(
    s => [s.id, s.querySelectorAll(":scope > .scroll tbody tr").length]))"""
LEGENDS = """Object.fromEntries(["gaps", "attribution", "timeline"].map(id => [id, Array.from(
    document.querySelectorAll(`#${id} g[id$="-legend_1"]`)).map(
        g => g.querySelectorAll('g[id*="-text_"]').length)]))"""
SCALES = """Array.from(document.querySelectorAll("figure svg"))
    .filter(s => s.getBoundingClientRect().width > 0)
    .map(s => s.getBoundingClientRect().width / s.width.baseVal.value)"""
FOLDS = """[document.querySelectorAll("#timeline details").length,
            document.querySelectorAll("#timeline details[open]").length]"""
LINKS = """Array.from(document.querySelectorAll("#data a")).map(a => a.href)"""
# Tables the reader must scroll sideways to read (their card is narrower than they are).
WIDE = """Array.from(document.querySelectorAll(".scroll"))
    .filter(d => d.scrollWidth > d.clientWidth + 1).map(d => d.closest("section").id)"""
# Text drawn over text inside a figure (matplotlib writes each label as a group `...-text_N` of
# glyph paths): pairs of such boxes that overlap by more than a pixel each way.
OVERLAPS = """Array.from(document.querySelectorAll("figure svg")).flatMap((svg, n) => {
    const boxes = Array.from(svg.querySelectorAll('g[id*="-text_"]'))
        .map(g => g.getBoundingClientRect()).filter(r => r.width > 0 && r.height > 0);
    const hits = [];
    boxes.forEach((a, i) => boxes.slice(i + 1).forEach(b => {
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 1 && h > 1) hits.push([n, Math.round(a.left), Math.round(a.top)]);
    }));
    return hits;
})"""
SWEEP = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "h200-sweep"


def test_sweep_report_is_legible(tmp_path):
    """The committed H200 sweep (5 models, 18 configurations, 3 repeats a side: 108 runs) on one
    page: a row per configuration, short legends, figures at their own size, a page a reader
    scrolls through (its first version was 43,575 px tall)."""
    dirs = sorted(p for p in SWEEP.iterdir() if p.is_dir())
    page = report_dirs(dirs, tmp_path / "report.html", n_boot=50, export=False)
    measure = {
        "rows": ROWS,
        "legends": LEGENDS,
        "scales": SCALES,
        "folds": FOLDS,
        "overlaps": OVERLAPS,
        "wide": WIDE,
    }
    result = load(page.as_uri(), tmp_path / "profile", measure=measure)
    assert result["problems"] == []
    height = mpimg.imread(io.BytesIO(result["png"]), format="png").shape[0]
    assert 4_000 < height < 12_500  # 12,016 px at 1400 px wide, noise fold shut
    rows = result["rows"]
    assert rows["prediction"] == rows["step"] == 18  # what explains each: folded, past 8
    assert result["wide"] == []  # no table past its card
    assert rows["compare"] == 2  # qwen3-0.6b with and without a grammar, at 8 and 32 streams
    assert result["legends"]["gaps"] == [2]  # depth 1, depth 2: not one entry per run
    assert result["legends"]["attribution"][0] <= 16  # the host phases
    # per configuration a lane chart and its step series, in that order
    lanes, series = result["legends"]["timeline"][::2], result["legends"]["timeline"][1::2]
    assert len(lanes) == len(series) == 18
    assert max(lanes) <= 8  # naming the tick's phases, not its runs
    assert set(series) == {4}  # period, bubble, batch size, prefill
    assert result["folds"] == [18, 1]
    # every figure (the 18 timelines and their 18 step series, folded or not, and 4 more) drawn at
    # 90% of its size or more
    assert len(result["scales"]) == 40 and min(result["scales"]) > 0.9
    assert result["overlaps"] == []  # the idle-gap panels' titles once ran together


def test_planted_script_is_shown_not_run(tmp_path):
    run_dir = tmp_path / "run"
    write_demo_run_dir(run_dir, streams=(2,), requests_per_stream=3, output_len=24)
    report = report_run_dir(plant(run_dir), n_boot=100)
    result = load(report.as_uri(), tmp_path / "profile")
    assert result["problems"] == []  # no alert dialog, no CSP violation: nothing tried to run
    assert result["scripts"] == 0
    assert EVIL in result["text"]  # the name is there, as text


def test_harness_sees_overlapping_text(tmp_path):
    """Control: OVERLAPS finds two text groups drawn over each other, and only those."""
    page = tmp_path / "overlap.html"
    page.write_text(
        '<!doctype html><figure><svg width="200" height="100">'
        '<g id="f-text_1"><rect x="0" y="0" width="50" height="20"/></g>'
        '<g id="f-text_2"><rect x="10" y="5" width="50" height="20"/></g>'
        '<g id="f-text_3"><rect x="120" y="50" width="20" height="20"/></g>'
        "</svg></figure>"
    )
    result = load(page.as_uri(), tmp_path / "profile", measure={"overlaps": OVERLAPS})
    assert len(result["overlaps"]) == 1
