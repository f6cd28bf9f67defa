"""The HTML report of a trace rather than a run directory: an nsys export with no metadata, another
engine's multi-process trace with its ranks side by side, and a run whose steps are not sure."""

import html
import re
import shutil

from bubblelab.report.report import REPORT_FILE, report_run_dir
from bubblelab.runs.traces import TRACES_DIR
from testing.synthetic_engines import Engine
from tests.foreign_checks import build


def test_report_of_a_single_trace(tmp_path):
    """An nsys export without metadata gets a page too: its stream count read from its steps, said
    so, and every host range of every step in the exported trace. Beside an index.json that names
    it (the committed traces), the page takes its model and stream count from there."""
    trace = tmp_path / "bare.sqlite.gz"
    shutil.copyfile(TRACES_DIR / "qwen3-0.6b-s32-d2.sqlite.gz", trace)
    html = report_run_dir(trace, n_boot=20, out=tmp_path / REPORT_FILE).read_text()
    assert "1 run, 1 configuration" in html and "32 streams" in html
    assert "the steady decode batch: the trace names no stream count" in html
    assert "No configuration was measured at both depths" in html
    assert (tmp_path / "export" / "trace.json.gz").is_file()
    indexed = TRACES_DIR / "qwen3-0.6b-s32-d2.sqlite.gz"
    html = report_run_dir(indexed, n_boot=20, out=tmp_path / "i" / REPORT_FILE).read_text()
    assert "qwen3-0.6b · NVIDIA H200 · 32 streams" in html
    assert "the steady decode batch" not in html


def test_a_trace_of_one_engine_over_two_gpus_gets_its_ranks_side_by_side(tmp_path):
    """nano-vllm at TP 2 (traces/foreign/): the page shows the two processes as one engine's ranks,
    as `bubblelab analyze` does: matched steps, sure together, per-rank medians, and no lag or
    straggler where the workers' steps run into rank 0's next step."""
    trace = TRACES_DIR / "foreign" / "nanovllm-tp2.sqlite.gz"
    page = report_run_dir(trace, n_boot=20, export=False, out=tmp_path / "r.html").read_text()
    section = page[page.index('id="split"') : page.index('id="timeline"')]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", section)).split())
    assert "2 processes of one trace" in text and "(65 of 65, 63 of 63 steps matched)" in text
    assert "Sure together: rank 0's steps are sure" in text
    assert re.search(r"0 3\.210 1\.003 4\.245 1\.880 0\.981 – –", text)
    assert re.search(r"1 2\.497 1\.706 4\.237 1\.652 0\.518 – –", text)
    assert "No lag or straggler: the ranks' steps were cut by graph and sync rules" in text
    # how each process's steps were found, first: rank 1 unsure on its own, confirmed by rank 0
    card = page[page.index('id="found"') : page.index('id="prediction"')]
    found = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", card)).split())
    assert re.search(r"-p909-g0 sync 65 \(64, 1\) 0\.042 100\.0% yes", found)
    assert re.search(r"-p999-g1 graph 63 \(63, 0\) 0\.034 91\.9% no", found)
    assert "not sure of the graph rule's steps" in found
    assert "Rank 0's sure steps confirm them" in found
    # the step table shows the engine by rank 0's run: its ranks are not repeats to pool
    table = page[page.index('id="step"') : page.index('id="split"')]
    row = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", table)).split())
    assert re.search(r"TP 2 1 as traced – 3\.21 → – 0\.314 → – 4\.25 → – 1\.003 → –", row)


def test_a_run_whose_steps_are_not_sure_carries_its_mark_into_the_step_table(tmp_path):
    """As `bubblelab analyze` marks such a run's cells ~: a figure copied from the page's table
    keeps its doubt (a JAX-like engine waiting in a host callback: only its pauses mark a step)."""
    trace, _ = build(tmp_path / "t.sqlite", Engine(steps=14, wait="callback", graphs_per_step=8,
                                                   nodes=16))  # fmt: skip
    page = report_run_dir(trace, n_boot=20, export=False, out=tmp_path / "r.html").read_text()
    table = page[page.index('id="step"') : page.index('id="timeline"')]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", table)).split())
    assert re.search(r"Fake GPU ~ 1 as traced", text)
    assert "~ : the steps of this run are not sure" in text

    sure, _ = build(tmp_path / "s.sqlite", Engine(steps=14))
    page = report_run_dir(sure, n_boot=20, export=False, out=tmp_path / "s.html").read_text()
    table = page[page.index('id="step"') : page.index('id="timeline"')]
    assert "not sure" not in table and "~</span>" not in table


def _text(page: str, start: str, end: str) -> str:
    section = page[page.index(start) : page.index(end)]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", section)).split())


def test_the_page_of_another_engines_trace_leads_with_what_pipelining_would_buy(tmp_path):
    """No configuration of a foreign trace ran at both depths, but the trace alone forecasts the
    gain (`bubblelab analyze` prints it): the page leads with the same figures, not with "nothing
    to predict"; an engine over two GPUs by its rank 0, as the rest of the page shows it."""
    from bubblelab.runs.analysis import analyze_traces

    for name, runs in (("nanovllm-raw", 1), ("nanovllm-tp2", 1)):
        trace = TRACES_DIR / "foreign" / f"{name}.sqlite.gz"
        said = analyze_traces([trace])["runs"][0]["pipelining"]
        page = report_run_dir(trace, n_boot=20, export=False, out=tmp_path / f"{name}.html")
        page = page.read_text()
        head = _text(page, "<header", "</header>")
        lo, hi = said["interval_pct"]
        assert f"{said['speedup_pct']:+.1f}% [{lo:+.1f}%, {hi:+.1f}%]" in head
        whole = said["whole_run"]
        assert f"over the whole trace {whole['speedup_pct']:+.1f}%" in head
        assert "upper bound (the profiled engine's: graphs traced node-level)" in head
        assert "No configuration was measured at both depths" not in page
        card = _text(page, *(f'<section class="card" id="{s}"' for s in ("prediction", "step")))
        assert card.startswith("What pipelining would buy") and card.count("assuming:") == runs
        assert f"pipelining would buy {said['speedup_pct']:+.1f}%" in card
        assert said["assumptions"][2] in card  # T_block, as analyze words it
    # steps not sure: the figure carries the doubt, as the step table's does
    trace, _ = build(tmp_path / "t.sqlite", Engine(steps=14, wait="callback", graphs_per_step=8,
                                                   nodes=16))  # fmt: skip
    page = report_run_dir(trace, n_boot=20, export=False, out=tmp_path / "r.html").read_text()
    head = _text(page, "<header", "</header>")
    assert re.search(r"~[+-]\d+\.\d%", head) and "~: its steps are not sure" in head


def test_the_page_of_a_trace_needs_no_torch():
    """Reading a trace is for any machine: the page's modules never pull in the engine's torch
    (it cost a page 1.2 s of imports once the trace's forecast reached the workload module)."""
    import subprocess
    import sys

    code = "import sys, bubblelab.report.report; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_the_page_names_a_trace_without_a_model_as_the_console_does(tmp_path):
    """A trace with no index.json beside it names no model: the page calls each run what
    `bubblelab analyze` calls it (another engine's by its file, ours by its id's start), never by
    its whole hash, and the processes of one trace stay apart."""
    from bubblelab.runs.analysis import analyze_traces

    for src, stem in (
        (TRACES_DIR / "foreign" / "cupy-decode.sqlite.gz", "cupy-decode"),
        (TRACES_DIR / "foreign" / "nanovllm-tp2.sqlite.gz", "tp2"),
        (TRACES_DIR / "qwen3-0.6b-s1-d1.sqlite.gz", "bare"),
    ):
        trace = tmp_path / f"{stem}.sqlite.gz"
        shutil.copyfile(src, trace)
        names = [r["name"] for r in analyze_traces([trace])["runs"]]
        page = report_run_dir(trace, n_boot=20, export=False, out=tmp_path / f"{stem}.html")
        page = html.unescape(page.read_text())
        assert not re.search(r"run [0-9a-f]{16}", page)
        for name in names:  # ours: 4aa3c242·s1·d1·r0 there, 4aa3c242 · NVIDIA H200 here
            assert f"{name.split('·')[0] if stem == 'bare' else name} · NVIDIA H" in page
        assert len(names) == (2 if stem == "tp2" else 1)
    assert "The run</summary>" in page and "1 runs" not in page


def test_the_page_of_our_own_blocking_trace_leads_with_its_forecast(tmp_path):
    """Our NVTX phases forecast nothing, but the trace read as any engine's does: the page of a
    depth-1 trace of bubblelab's engine leads with `bubblelab analyze TRACE --domain none`'s
    figures, says so, and a depth-2 trace's page still has nothing to forecast."""
    from bubblelab.runs.analysis import analyze_traces

    trace = TRACES_DIR / "qwen3-0.6b-s1-d1.sqlite.gz"
    said = analyze_traces([trace], domain="none")["runs"][0]["pipelining"]
    page = report_run_dir(trace, n_boot=20, export=False, out=tmp_path / "d1.html").read_text()
    head = _text(page, "<header", "</header>")
    lo, hi = said["interval_pct"]
    assert f"{said['speedup_pct']:+.1f}% [{lo:+.1f}%, {hi:+.1f}%]" in head
    assert "qwen3-0.6b · NVIDIA H200 · 1 stream · depth 1" in head
    card = _text(page, *(f'<section class="card" id="{s}"' for s in ("prediction", "step")))
    assert "blocking run of bubblelab's engine" in card and "TRACE --domain none" in card
    assert f"pipelining would buy {said['whole_run']['speedup_pct']:+.1f}%" in card
    d2 = TRACES_DIR / "qwen3-0.6b-s1-d2.sqlite.gz"
    page = report_run_dir(d2, n_boot=20, export=False, out=tmp_path / "d2.html").read_text()
    assert "No configuration was measured at both depths" in page


def test_traces_on_one_page_keep_what_each_page_alone_shows(tmp_path):
    """Beside each other the traces' runs are renamed (merge_results prefixes their ids), and the
    sections found by the catalog's ids followed them: every forecast stays, an engine over two
    GPUs stays one row, a run whose steps are not sure keeps its ~ (all three were lost)."""
    from bubblelab.report.report import report_dirs

    unsure, _ = build(tmp_path / "t.sqlite", Engine(steps=14, wait="callback", graphs_per_step=8,
                                                    nodes=16))  # fmt: skip
    foreign = TRACES_DIR / "foreign"
    traces = [foreign / "nanovllm-raw.sqlite.gz", foreign / "nanovllm-tp2.sqlite.gz",
              TRACES_DIR / "qwen3-0.6b-s1-d1.sqlite.gz", unsure]  # fmt: skip
    page = report_dirs(traces, tmp_path / "all.html", n_boot=20, export=False).read_text()
    card = _text(page, *(f'<section class="card" id="{s}"' for s in ("prediction", "step")))
    assert card.startswith("What pipelining would buy No configuration here was measured")
    assert "(and each blocking run of bubblelab's engine, read as any engine's trace)" in card
    assert card.count("assuming:") == 4 and "No configuration was measured" not in page
    table = _text(page, 'id="step"', 'id="split"')
    assert "TP 2 1 as traced" in table  # rank 0's run, its worker not pooled with it as a repeat
    assert "t.sqlite · Fake GPU ~ 1 as traced" in table
    assert "4 runs, 4 configurations" in page


def test_a_blocking_trace_beside_a_pipelined_one_is_checked_on_the_page(tmp_path):
    """Our depth-1 and depth-2 traces of one configuration on one page: the forecast from the
    first is set beside the step the second measured (runs.analysis.checked_forecast, as
    `bubblelab compare` does); a depth-2 trace of another configuration checks nothing."""
    from bubblelab.report.report import report_dirs
    from bubblelab.runs.analysis import checked_forecast

    d1, d2 = (TRACES_DIR / f"qwen3-0.6b-s32-d{d}.sqlite.gz" for d in (1, 2))
    page = report_dirs([d1, d2], tmp_path / "p.html", n_boot=20, export=False).read_text()
    card = _text(page, *(f'<section class="card" id="{s}"' for s in ("prediction", "step")))
    checked = checked_forecast(d1, d2)
    assert checked is not None
    step = checked["pipelined_ms"]
    assert f"step took {step[1]:.3f} ms where this trace alone foresaw {step[0]:.3f}" in card
    gain = checked["speedup_pct"]
    assert f"by {gain[1]:+.1f}% against the {gain[0]:+.1f}% foreseen" in card
    assert "the steady step went 1.704 → 1.534 ms, +10.0% a step: the engine's own gain" in card
    other = TRACES_DIR / "qwen3-0.6b-s1-d2.sqlite.gz"
    page = report_dirs([d1, other], tmp_path / "q.html", n_boot=20, export=False).read_text()
    assert "Checked against" not in page and "pipelining would buy" in page
