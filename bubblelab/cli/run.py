"""`bubblelab run` and `bubblelab demo`: drive the engine on a workload and print what it
measured."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console()


class ConstraintChoice(StrEnum):
    none = "none"
    point = "point"
    detect = "detect"


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("demo")(demo)


def run(
    model: str | None = typer.Option(
        None, help="Preset name, HF checkpoint dir or GGUF file (default: embedded SmolLM2)."
    ),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    dtype: str | None = typer.Option(
        None, help="fp32, bf16 or fp16 (default: fp32 on CPU, bf16 on CUDA)."
    ),
    depth: int = typer.Option(2, help="Pipeline depth: 1 = blocking, 2 = pipelined."),
    tensor_parallel: int = typer.Option(1, help="GPUs (processes) the model is split over."),
    streams: int = typer.Option(8, help="Concurrent requests."),
    requests: int | None = typer.Option(None, help="Total requests (default 4 x streams)."),
    output_len_mean: float = typer.Option(110.0, help="Mean generated length L."),
    output_len_dist: str = typer.Option("uniform", help="uniform, exponential or fixed."),
    prompt_len: int = typer.Option(32, help="Prompt tokens per request."),
    constraint: ConstraintChoice = typer.Option(
        ConstraintChoice.none, help="Constrain requests to point/detect."
    ),
    constrained_share: float = typer.Option(
        None, help="Share of constrained requests (default 1 with --constraint)."
    ),
    arrival_rate: float = typer.Option(
        None, help="Poisson arrivals per second (default: closed loop)."
    ),
    temperature: float = typer.Option(0.0, help="0 = greedy."),
    seed: int = typer.Option(0, help="Workload and sampling seed."),
    max_num_seqs: int | None = typer.Option(None, help="Batch rows (default: max(streams, 8))."),
    max_model_len: int = typer.Option(1024, help="Longest sequence the KV cache must hold."),
    enforce_eager: bool = typer.Option(False, help="Disable CUDA graphs."),
    compile: bool | None = typer.Option(
        None,
        "--compile/--no-compile",
        help="torch.compile the fused elementwise ops (default: on for CUDA, off for CPU).",
    ),
    attention_backend: str = typer.Option("auto", help="auto, torch, flash-attn or triton."),
    json_path: Path | None = typer.Option(
        None, "--json", help="Write every request's token ids and the summary here."
    ),
) -> None:
    """Run a workload through the engine and print throughput, step time and prefill vs decode
    time."""
    from bubblelab.engine.config import EngineConfig, default_dtype
    from bubblelab.engine.driver import run_workload
    from bubblelab.engine.llm_engine import LLMEngine
    from bubblelab.engine.workload import WorkloadSpec

    c = None if constraint is ConstraintChoice.none else constraint.value
    share = constrained_share if constrained_share is not None else (1.0 if c else 0.0)
    spec = WorkloadSpec(
        streams=streams,
        requests=requests,
        output_len_mean=output_len_mean,
        output_len_dist=output_len_dist,
        prompt_len=prompt_len,
        arrival_rate=arrival_rate,
        constraint=c,
        constrained_share=share,
        temperature=temperature,
        seed=seed,
    )
    config = EngineConfig(
        model=model,
        device=device,
        dtype=dtype or default_dtype(device),
        depth=depth,
        tensor_parallel=tensor_parallel,
        max_num_seqs=max_num_seqs or max(streams, 8),
        max_model_len=max_model_len,
        enforce_eager=enforce_eager,
        compile=compile,
        attention_backend=attention_backend,
        seed=seed,
    )
    with console.status(f"loading {model or 'the embedded SmolLM2-135M-Instruct'} on {device}"):
        engine = LLMEngine(config)
    with _progress() as bar:
        task = bar.add_task(f"depth {depth}, {streams} streams", total=spec.requests)
        result = run_workload(engine, spec, progress=lambda n: bar.advance(task, n))
    engine.close()
    print_summary(result.summary)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(
            json.dumps(
                {
                    "summary": result.summary,
                    "requests": {
                        rid: {"token_ids": ids, "finish_reason": result.finish_reasons[rid]}
                        for rid, ids in sorted(result.outputs.items())
                    },
                },
                indent=1,
            )
        )
        console.print(f"wrote {json_path}")


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def print_summary(s: dict) -> None:
    t = Table(
        title=f"{s['model']} on {s['device']} · depth {s['depth']} · {s['streams']} streams",
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
    t.add_row("CUDA graphs", "yes" if s["cuda_graphs"] else "no")
    console.print(t)


def demo(
    question: str = typer.Option("What is the capital of France?", help="The chat question."),
    streams: str = typer.Option("1,4", help="Streams of the profiled sweep (CPU-sized)."),
    output_len_mean: float = typer.Option(32.0, help="Mean generated length of the sweep."),
    out: Path | None = typer.Option(
        None, help="Run directory (default reports/demo-<timestamp>/)."
    ),
) -> None:
    """The main job on the embedded SmolLM2-135M-Instruct: answer a chat question, then profile
    depth 1 vs 2."""
    import time

    from bubblelab.cli.sweep import run_and_profile
    from bubblelab.engine import LLM, SamplingParams
    from bubblelab.engine.tokenizer import chat_prompt_ids

    with console.status("loading the embedded SmolLM2-135M-Instruct (GGUF)"):
        llm = LLM()
    t0 = time.perf_counter()
    answer = llm.generate(chat_prompt_ids(llm.tokenizer, question), SamplingParams(max_tokens=32))[
        0
    ]
    dt = time.perf_counter() - t0
    llm.close()
    console.print(f"[bold]Q:[/bold] {question}\n[bold]A:[/bold] {answer.text.strip()}")
    console.print(
        f"{len(answer.token_ids)} tokens in {dt:.2f} s: {len(answer.token_ids) / dt:.1f} tokens/s\n"
    )
    run_and_profile(
        model=None,
        device="cpu",
        dtype="fp32",
        depths="1,2",
        tensor_parallel=1,
        streams=streams,
        output_len_mean=output_len_mean,
        requests_per_stream=2,
        prompt_len=32,
        repeats=1,
        constraint=None,
        max_model_len=512,
        attention_backend="auto",
        out=out or Path("reports") / time.strftime("demo-%Y%m%d-%H%M%S"),
        nsys=None,
    )
