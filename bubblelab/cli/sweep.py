"""`bubblelab run-and-profile`: the sweep under nsys (or the in-process timeline), then the
report."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
    streams: str = typer.Option("1,8,32", help="Concurrent streams per configuration."),
    output_len_mean: float = typer.Option(110.0, help="Mean generated length L."),
    requests_per_stream: int = typer.Option(4, help="Requests per stream in each run."),
    prompt_len: int = typer.Option(32, help="Prompt tokens per request."),
    repeats: int = typer.Option(1, help="Repeats of the whole sweep."),
    constraint: str | None = typer.Option(None, help="point or detect: constrain every request."),
    max_model_len: int = typer.Option(512, help="Longest sequence."),
    attention_backend: str = typer.Option("auto", help="auto, torch, flash-attn or triton."),
    out: Path | None = typer.Option(None, help="Run directory (default reports/<timestamp>/)."),
    nsys: bool | None = typer.Option(
        None, "--nsys/--no-nsys", help="Force or forbid nsys (default: use it when found)."
    ),
) -> None:
    """Profile depth 1 vs depth 2 over a sweep, ingest into DuckDB, analyse, and write an HTML
    report."""
    from bubblelab.cli.predict import prediction_table
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
    configs = spec.configs()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("runs", total=len(configs))

        def on_run(tag: str, s: dict) -> None:
            bar.console.print(
                f"{tag}: {s['tokens_per_s']:.1f} tokens/s, decode step {s['step_ms_median']:.3f} ms"
            )
            bar.advance(task)

        run_sweep(spec, out, use_nsys=nsys, on_run=on_run, say=bar.console.print)
    report = report_run_dir(out)
    results = read_results(out)
    table = predict_runs(results.runs, results.steps)
    if len(table):
        Console(width=max(console.width, 160)).print(prediction_table(table, blog=False))
    console.print(f"report: {report}")
