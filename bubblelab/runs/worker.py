"""One measured run, in its own process so Nsight Systems can wrap it:
`python -m bubblelab.runs.worker CONFIG.json`.

The config names the engine options, the workload and where to write the result: a JSON with the
run's summary and its in-process timeline (host ranges, device intervals, step infos).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from bubblelab.engine.config import EngineConfig
from bubblelab.engine.driver import RunResult, run_workload
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import LoadedModel
from bubblelab.engine.timeline import StepInfo, Timeline
from bubblelab.engine.workload import WorkloadSpec


def run_one(config: dict, loaded: LoadedModel | None = None) -> RunResult:
    """Run one configuration: {"engine": EngineConfig kwargs, "workload": WorkloadSpec kwargs,
    "nvtx": bool}."""
    engine = LLMEngine(
        EngineConfig(**config["engine"]),
        loaded,
        timeline=Timeline(),
        nvtx=config.get("nvtx", False),
    )
    try:
        return run_workload(
            engine, WorkloadSpec(**config["workload"]), profile=config.get("profile", False)
        )
    finally:
        engine.close()


def result_record(result: RunResult) -> dict:
    t = result.timeline
    return {
        "summary": {**result.summary, **machine_facts()},
        "timeline": {
            "depth": t.depth,
            "host": t.host,
            "device": t.device,
            "steps": [vars(s) for s in t.steps.values()],
        },
    }


def timeline_from_record(record: dict) -> Timeline:
    tl = record["timeline"]
    t = Timeline(
        depth=tl["depth"],
        host=[tuple(r) for r in tl["host"]],
        device=[tuple(r) for r in tl["device"]],
    )
    for s in tl["steps"]:
        t.add_step(StepInfo(**s))
    return t


def machine_facts() -> dict:
    facts: dict[str, str | None] = {"torch": torch.__version__, "driver": None}
    if torch.cuda.is_available():
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            facts["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, IndexError):
            pass
    return facts


def main(argv: list[str]) -> None:
    config = json.loads(Path(argv[0]).read_text())
    result = run_one(config)
    Path(config["out_json"]).write_text(json.dumps(result_record(result)))


if __name__ == "__main__":
    main(sys.argv[1:])
