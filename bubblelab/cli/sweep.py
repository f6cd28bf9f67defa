"""`bubblelab run-and-profile`: the sweep under nsys (or the in-process timeline), then the
report."""

from __future__ import annotations

import math
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bubblelab.errors import BubblelabError

console = Console()


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BubblelabError(f"--{what} takes comma-separated integers, got {text!r}") from None
    if not values:
        raise BubblelabError(f"--{what} is empty")
    return values


def register(app: typer.Typer) -> None:
    app.command("run-and-profile")(run_and_profile)


def run_and_profile(
    model: str | None = typer.Option(
        None, help="Preset, HF dir or GGUF (default: the embedded SmolLM2)."
    ),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    dtype: str | None = typer.Option(
        None, help="fp32/bf16/fp16 (default fp32 on CPU, bf16 on CUDA)."
    ),
    depths: str = typer.Option("1,2", help="Pipeline depths, run back to back."),
    tensor_parallel: int = typer.Option(1, help="GPUs (processes) the model is split over."),
    streams: str = typer.Option("1,8,32", help="Concurrent streams per configuration."),
    output_len_mean: float = typer.Option(110.0, help="Mean generated length L."),
    requests_per_stream: int = typer.Option(
        None, help="Requests per stream in each run (default: enough for ~400 decode steps)."
    ),
    prompt_len: int = typer.Option(32, help="Prompt tokens per request."),
    repeats: int = typer.Option(
        5, help="Unprofiled repeats (depth 1 and 2 paired on the same requests); nsys runs one."
    ),
    constraint: str | None = typer.Option(None, help="point or detect: constrain every request."),
    max_model_len: int = typer.Option(512, help="Longest sequence."),
    attention_backend: str = typer.Option("auto", help="auto, torch, flash-attn or triton."),
    out: Path | None = typer.Option(None, help="Run directory (default reports/<timestamp>/)."),
    nsys: bool | None = typer.Option(
        None, "--nsys/--no-nsys", help="Force or forbid nsys (default: use it when found)."
    ),
) -> None:
    """Measure depth 1 vs depth 2 over a sweep, unprofiled and under nsys; analyse; report."""
    from bubblelab.cli.predict import prediction_table
    from bubblelab.costmodel.perturbation import profiler_perturbation
    from bubblelab.costmodel.predict import predict_runs
    from bubblelab.engine.config import default_dtype
    from bubblelab.report.report import report_run_dir
    from bubblelab.runs.rundir import read_results
    from bubblelab.runs.sweep import SweepSpec, run_sweep

    spec = SweepSpec(
        model=model,
        device=device,
        dtype=dtype or default_dtype(device),
        depths=_ints(depths, "depths"),
        tensor_parallel=tensor_parallel,
        streams=_ints(streams, "streams"),
        output_len_mean=output_len_mean,
        requests_per_stream=requests_per_stream,
        prompt_len=prompt_len,
        repeats=repeats,
        constraint=constraint,
        constrained_share=1.0 if constraint else 0.0,
        max_model_len=max_model_len,
        attention_backend=attention_backend,
    )
    out = out or Path("reports") / time.strftime("%Y%m%d-%H%M%S")
    runs = len(spec.runs()) + (len(spec.runs(spec.nsys_repeats)) if nsys is not False else 0)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("runs", total=runs)

        def on_run(tag: str, s: dict) -> None:
            bar.console.print(
                f"{tag}: {s['tokens_per_s']:.1f} tokens/s, decode step {s['step_ms_median']:.3f} ms"
            )
            bar.advance(task)

        run_sweep(spec, out, use_nsys=nsys, on_run=on_run, say=bar.console.print)
    report = report_run_dir(out)
    results = read_results(out)
    wide = Console(width=max(console.width, 160))
    table = predict_runs(results.runs, results.steps, results.requests)
    if len(table):
        wide.print(prediction_table(table, blog=False))
    perturbation = profiler_perturbation(results.runs, results.steps)
    if len(perturbation):
        wide.print(perturbation_table(perturbation))
    console.print(f"report: {report}")


def perturbation_table(table) -> Table:
    """What nsys did to each phase's steady-state median (ms, unprofiled → under nsys)."""
    out = Table(
        title="Under nsys: steady-state medians, unprofiled → profiled",
        title_justify="left",
        header_style="bold",
    )
    parts = ("period", "forward", "sampling", "bubble", "host_tick", "launch", "commit")
    for name in ("configuration", "depth", *parts, "speedup"):
        out.add_column(name, justify="left" if name == "configuration" else "right", no_wrap=True)
    for r in table.to_dict("records"):
        cells = [f"{r[f'{p}_plain']:.3f} → {r[f'{p}_nsys']:.3f} ({100 * r[f'{p}_inflation']:+.0f}%)"
                 if r.get(f"{p}_plain") else "–" for p in parts]  # fmt: skip
        plain, nsys = r.get("speedup_plain_pct", math.nan), r.get("speedup_nsys_pct", math.nan)
        speedup = "–" if math.isnan(plain) else f"{plain:+.1f}% → {nsys:+.1f}%"
        out.add_row(r["label"], str(r["depth"]), *cells, speedup)
    return out
