"""`bubblelab run` and `bubblelab demo`: drive the engine on a workload and print what it
measured."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..core.words import counted
from . import options
from .output import SCHEMA, check_json_dest, console_for, emit_and_say
from .tables import show

if TYPE_CHECKING:
    from ..runs.driver import RunResult
    from ..runs.plain import RunPlan


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("demo")(demo)


def run(
    model: str | None = options.MODEL,
    device: str = options.DEVICE,
    dtype: str | None = options.DTYPE,
    depth: str = typer.Option(
        "2",
        help="Pipeline depth: 1 = blocking, 2 = pipelined; a comma-separated list runs each "
        "workload at each, back to back on one engine.",
    ),
    tensor_parallel: int = typer.Option(1, help="GPUs (processes) the model is split over."),
    streams: str = options.STREAMS,
    requests_per_stream: int | None = typer.Option(
        None, help="Requests per stream in each run (default 4)."
    ),
    requests: int | None = typer.Option(None, hidden=True),  # the old total per run: scripts
    output_len_mean: float = options.OUTPUT_LEN_MEAN,
    output_len_dist: str = typer.Option("uniform", help="uniform, exponential or fixed."),
    prompt_len: int = options.PROMPT_LEN,
    constraint: str | None = options.CONSTRAINT,
    constrained_share: float | None = typer.Option(
        None, help="Share of constrained requests (default 1 with --constraint)."
    ),
    arrival_rate: float | None = typer.Option(
        None, help="Poisson arrivals per second (default: closed loop)."
    ),
    temperature: float = typer.Option(0.0, help="0 = greedy."),
    seed: int = options.SEED,
    max_num_seqs: int | None = typer.Option(
        None, help="Batch rows (default: the most streams, at least 8)."
    ),
    max_model_len: int = options.MAX_MODEL_LEN,
    enforce_eager: bool = typer.Option(
        False, "--enforce-eager", metavar="", help="Disable CUDA graphs."
    ),
    compile: bool | None = typer.Option(
        None,
        "--compile/--no-compile",
        metavar="",
        help="torch.compile the fused elementwise ops (default: on for CUDA, off for CPU).",
    ),
    attention_backend: str = options.ATTENTION_BACKEND,
    json_out: str | None = options.JSON,
) -> None:
    """Run a workload through the engine and print what it measured.

    One run per streams value: throughput, step time, prefill vs decode time and per-request
    latency (TTFT, TPOT, ITL)."""
    from ..engine.llm_engine import LLMEngine
    from ..runs.plain import plan_runs, run_plan, run_record

    dest = check_json_dest(json_out)
    plan = plan_runs(
        streams=streams,
        model=model,
        device=device,
        dtype=dtype,
        depth=depth,
        tensor_parallel=tensor_parallel,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        enforce_eager=enforce_eager,
        compile=compile,
        attention_backend=attention_backend,
        seed=seed,
        constraint=constraint,
        constrained_share=constrained_share,
        requests=requests,
        output_len_mean=output_len_mean,
        output_len_dist=output_len_dist,
        prompt_len=prompt_len,
        arrival_rate=arrival_rate,
        temperature=temperature,
    )
    if requests_per_stream is not None:
        plan = _per_stream(plan, requests_per_stream, requests)
    console = console_for(dest)
    with console.status(
        Text(f"loading {model or 'the embedded SmolLM2-135M-Instruct'} on {device}")
    ):
        engine = LLMEngine(plan.engine)
    try:
        with _progress(console) as bar:

            def on_start(spec, depth):
                task = bar.add_task(
                    f"depth {depth}, {counted(spec.streams, 'stream')}", total=spec.requests
                )
                return lambda n: bar.advance(task, n)

            results = run_plan(plan, on_start=on_start, engine=engine)
    finally:
        engine.close()
    for result in results:
        show(console, summary_table(result))
    if len(plan.depths) > 1:
        show(console, depths_table(results))
    emit_and_say(console, dest, {"schema": SCHEMA, "runs": [run_record(r) for r in results]})


def _per_stream(plan: RunPlan, per_stream: int, requests: int | None) -> RunPlan:
    """Each run's requests as a number per stream, as run-and-profile counts them."""
    from dataclasses import replace

    from ..core.checks import check_int
    from ..core.errors import BubblelabError
    from ..runs.workload import MAX_REQUESTS

    if requests is not None:
        raise BubblelabError("give --requests-per-stream or --requests (per run), not both")
    check_int("requests_per_stream", per_stream, 1, MAX_REQUESTS)
    workloads = [replace(w, requests=per_stream * w.streams) for w in plan.workloads]
    for workload in workloads:
        workload.check_fits(plan.engine.max_model_len)
    return replace(plan, workloads=workloads)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def summary_table(result: RunResult) -> Table:
    s = result.summary
    streams = counted(s["streams"], "stream")
    t = Table(
        title=f"{s['model']} on {s['device']} · depth {s['depth']} · {streams}", show_header=False
    )
    t.add_row("generated tokens", f"{s['generated_tokens']} (mean L {s['mean_generated_len']:.1f})")
    t.add_row("throughput", f"{s['tokens_per_s']:.1f} tokens/s over {s['wall_s']:.2f} s")
    t.add_row(
        "decode step (median, p10-p90)",
        f"{s['step_ms_median']:.3f} ms ({s['step_ms_p10']:.3f}-{s['step_ms_p90']:.3f}) "
        f"over {counted(s['decode_steps'], 'step')}",
    )
    t.add_row(
        "prefill vs decode time",
        f"{s['prefill_s']:.3f} s vs {s['decode_s']:.3f} s "
        f"({counted(s['prefill_steps'], 'prefill')})",
    )
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL")):
        stats = result.latency.get(key) or {}
        if stats.get("mean") is not None:
            t.add_row(
                f"{label} mean / median / p99",
                f"{stats['mean']:.2f} / {stats['median']:.2f} / {stats['p99']:.2f} ms",
            )
    if s.get("handoff_probe_n"):
        t.add_row(
            "hand-over between queued steps (probe)",
            f"{s['handoff_probe_ms'] * 1e3:.1f} us (IQR {s['handoff_probe_iqr_ms'] * 1e3:.1f} us, "
            f"{counted(s['handoff_probe_n'], 'sample')})",
        )
    t.add_row("CUDA graphs", "yes" if s["cuda_graphs"] else "no")
    return t


def depths_table(results: list[RunResult]) -> Table:
    """Each workload's runs at its depths side by side: tokens/s, the decode step, and whether
    every request got the same tokens (the depth moves when work is launched, never what it is)."""
    first = results[0].summary["depth"]
    t = Table(
        title=f"Against depth {first}, one run each", title_justify="left", caption_justify="left"
    )
    for name in ("streams", "depth", "tokens/s", "change", "decode step ms", "same tokens"):
        t.add_column(name, justify="left" if name == "same tokens" else "right", no_wrap=True)
    base = None
    for result in results:
        s = result.summary
        if s["depth"] == first:
            base = result
        change = s["tokens_per_s"] / base.summary["tokens_per_s"] - 1 if base else None
        same = result.outputs == base.outputs if base else None
        t.add_row(
            str(s["streams"]),
            str(s["depth"]),
            f"{s['tokens_per_s']:,.1f}",
            "–" if change is None or result is base else f"{100 * change:+.1f}%",
            f"{s['step_ms_median']:.3f}",
            "–" if same is None or result is base else "yes" if same else "NO",
        )
    t.caption = (
        "one run of each, so its noise is unknown: run-and-profile repeats and pairs the depths "
        "for a speedup with its interval"
    )
    return t


def demo(
    question: str = typer.Option("What is the capital of France?", help="The chat question."),
    streams: str = typer.Option("1,4", help="Streams of the profiled sweep (CPU-sized)."),
    output_len_mean: float = typer.Option(24.0, help="Mean generated length of the sweep."),
    repeats: int = typer.Option(
        3, help="Repeat pairs per configuration: their spread is the speedup's noise."
    ),
    out: Path | None = typer.Option(
        None, help="A new run directory (default reports/demo-<timestamp>/)."
    ),
    force: bool = options.FORCE,
    json_out: str | None = options.JSON,
) -> None:
    """Answer a chat question on the embedded SmolLM2, then profile depth 1 against depth 2.

    The model is SmolLM2-135M-Instruct, on the CPU; the sweep's report is written to --out."""
    import time

    from ..engine import LLM, SamplingParams
    from ..engine.tokenizer import chat_prompt_ids
    from ..runs.state import check_new_run_dir
    from ..runs.sweep import sweep_spec
    from .sweep import profile_and_report

    spec = sweep_spec(
        "1,2",
        streams,
        device="cpu",
        dtype="fp32",
        output_len_mean=output_len_mean,
        requests_per_stream=2,
        repeats=repeats,  # exactly this many pairs: enough to say whether the CPU's noise hides it
        min_repeats=repeats,
        max_model_len=512,
    )
    dest = check_json_dest(json_out)
    out = out or Path("reports") / time.strftime("demo-%Y%m%d-%H%M%S")
    check_new_run_dir(out, force=force)  # before the chat, not after it
    console = console_for(dest)
    with console.status("loading the embedded SmolLM2-135M-Instruct (GGUF)"):
        llm = LLM()
    t0 = time.perf_counter()
    answer = llm.generate(chat_prompt_ids(llm.tokenizer, question), SamplingParams(max_tokens=32))
    dt = time.perf_counter() - t0
    llm.close()
    console.print("[bold]Q:[/bold] ", end="")
    console.print(question, markup=False)
    console.print("[bold]A:[/bold] ", end="")
    console.print(answer[0].text.strip(), markup=False)
    n = len(answer[0].token_ids)
    console.print(f"{n} tokens in {dt:.2f} s: {n / dt:.1f} tokens/s\n")
    chat = {"question": question, "answer": answer[0].text.strip(), "generated_tokens": n,
            "seconds": dt, "tokens_per_s": n / dt}  # fmt: skip
    profile_and_report(spec, out, nsys=False, force=force, dest=dest, head=chat)
    from ..runs.noise import noise_lines
    from ..runs.rundir import read_results

    console.print("\n[bold]Depth 2 against this CPU's noise[/bold] (each repeat is a pair):")
    for line in noise_lines(read_results(out).runs):
        console.print("  " + line, markup=False, soft_wrap=True)  # one line each, unwrapped
