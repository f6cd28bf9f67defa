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

from . import options
from .output import check_json_dest, console_for, emit_json
from .tables import show

if TYPE_CHECKING:
    from ..runs.driver import RunResult


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("demo")(demo)


def run(
    model: str | None = options.MODEL,
    device: str = options.DEVICE,
    dtype: str | None = options.DTYPE,
    depth: int = typer.Option(2, help="Pipeline depth: 1 = blocking, 2 = pipelined."),
    tensor_parallel: int = typer.Option(1, help="GPUs (processes) the model is split over."),
    streams: str = options.STREAMS,
    requests: int | None = typer.Option(None, help="Requests per run (default 4 x streams)."),
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
    enforce_eager: bool = typer.Option(False, help="Disable CUDA graphs."),
    compile: bool | None = typer.Option(
        None,
        "--compile/--no-compile",
        help="torch.compile the fused elementwise ops (default: on for CUDA, off for CPU).",
    ),
    attention_backend: str = options.ATTENTION_BACKEND,
    json_out: str | None = options.JSON,
) -> None:
    """Run a workload through the engine (one per streams value) and print throughput, step time,
    prefill vs decode time and per-request latency (TTFT, TPOT, ITL)."""
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
    console = console_for(dest)
    with console.status(
        Text(f"loading {model or 'the embedded SmolLM2-135M-Instruct'} on {device}")
    ):
        engine = LLMEngine(plan.engine)
    try:
        with _progress(console) as bar:

            def on_start(spec):
                task = bar.add_task(f"depth {depth}, {_streams(spec.streams)}", total=spec.requests)
                return lambda n: bar.advance(task, n)

            results = run_plan(plan, on_start=on_start, engine=engine)
    finally:
        engine.close()
    for result in results:
        show(console, summary_table(result))
    written = emit_json(dest, {"runs": [run_record(r) for r in results]})
    if written is not None:
        console.print(f"wrote {written}", markup=False)


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


def _streams(n: int) -> str:
    return f"{n} stream{'s' if n != 1 else ''}"


def summary_table(result: RunResult) -> Table:
    s = result.summary
    t = Table(
        title=f"{s['model']} on {s['device']} · depth {s['depth']} · {_streams(s['streams'])}",
        show_header=False,
    )
    t.add_row("generated tokens", f"{s['generated_tokens']} (mean L {s['mean_generated_len']:.1f})")
    t.add_row("throughput", f"{s['tokens_per_s']:.1f} tokens/s over {s['wall_s']:.2f} s")
    t.add_row(
        "decode step (median, p10-p90)",
        f"{s['step_ms_median']:.3f} ms ({s['step_ms_p10']:.3f}-{s['step_ms_p90']:.3f}) "
        f"over {s['decode_steps']} steps",
    )
    t.add_row(
        "prefill vs decode time",
        f"{s['prefill_s']:.3f} s vs {s['decode_s']:.3f} s ({s['prefill_steps']} prefills)",
    )
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL")):
        stats = result.latency.get(key) or {}
        if stats.get("mean") is not None:
            t.add_row(
                f"{label} mean / median / p99",
                f"{stats['mean']:.2f} / {stats['median']:.2f} / {stats['p99']:.2f} ms",
            )
    t.add_row("CUDA graphs", "yes" if s["cuda_graphs"] else "no")
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
    force: bool = typer.Option(False, help="Replace the run already in --out."),
) -> None:
    """The main job on the embedded SmolLM2-135M-Instruct: answer a chat question, then profile
    depth 1 vs 2."""
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
    out = out or Path("reports") / time.strftime("demo-%Y%m%d-%H%M%S")
    check_new_run_dir(out, force=force)  # before the chat, not after it
    console = Console()
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
    profile_and_report(spec, out, nsys=False, force=force)
    from ..runs.noise import noise_lines
    from ..runs.rundir import read_results

    console.print("\n[bold]Depth 2 against this CPU's noise[/bold] (each repeat is a pair):")
    for line in noise_lines(read_results(out).runs):
        console.print("  " + line, markup=False, soft_wrap=True)  # one line each, unwrapped
