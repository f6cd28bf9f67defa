"""Numbers in the user docs cannot drift: their tables are generated from the data they describe
(tools/docs/generated.py) and must match it, and their commands run."""

import glob
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tools.docs import generated, measurements_index

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = (
    "README.md",
    "traces/README.md",
    "costmodel/README.md",
    # The cost model's pages (#16): results a user reads, the README's section among them.
    "docs/h200-costmodel.md",
    "docs/costmodel-summary.md",
    "docs/costmodel-heldout.md",
    "docs/foreign-traces.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb")),
)


@pytest.mark.parametrize("name", generated.FILES)
def test_generated_blocks_match_the_data(name):
    text = (ROOT / name).read_text()
    blocks = generated.BLOCK.findall(text)
    assert blocks, f"{name} has no generated block"
    assert generated.render(text) == text, (
        f"{name} is stale: run `python -m tools.docs.generated` and commit the result"
    )


def test_every_renderer_has_its_block():
    texts = [(ROOT / name).read_text() for name in generated.FILES]
    names = {m["name"] for text in texts for m in generated.BLOCK.finditer(text)}
    assert names == set(generated.RENDERERS)


def test_a_stale_block_is_caught():
    text = (ROOT / "traces" / "README.md").read_text()
    stale = text.replace("| `qwen3-0.6b-s1-d1` |", "| `qwen3-0.6b-s1-d1` | 1 |", 1)
    assert stale != text and generated.render(stale) == text


def test_the_readmes_analyze_command_runs():
    """The command the README shows for the committed traces works as written (a glob that caught
    traces/README.md or the probe trace exited 2)."""
    readme = (ROOT / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("bubblelab analyze traces/"))
    argv = shlex.split(line.split("#")[0])
    files = [
        f for a in argv[2:] if not a.startswith("-") for f in sorted(glob.glob(a, root_dir=ROOT))
    ]
    assert len(files) == 4
    done = subprocess.run(
        [sys.executable, "-m", "bubblelab", "analyze", *files, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    # Named by configuration: traces/index.json beside them says their model.
    names = sorted(run["name"] for run in json.loads(done.stdout)["runs"])
    assert names == [f"qwen3-0.6b·s{s}·d{d}·r0" for s in (1, 32) for d in (1, 2)]


# "session 2", "this session": how the work went, not what a user needs (an nsys session is)
PAST = r"\bsessions? \d|\bsession-\d|\b(?:this|last|previous|next|earlier) session|session's"
# "today's engine", "call A", "the GPU call": a day's work told as a story (case-sensitive)
STORY = r"\b[Tt]oday\b|\bcall [A-Z]\b|\bGPU calls?\b|\bthis branch\b"
# The docs the README sends a user to (tools/gpu_machine/README.md describes this project's own GPU
# machine set-up, .device/ included; docs/measurements/ holds the data, its README the commands).
LINKED_DOCS = (
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
    "docs/measurements/README.md",
    "benchmarks/README.md",
    "profiling/README.md",
    "tools/README.md",
)


@pytest.mark.parametrize("name", USER_DOCS)
def test_user_docs_stay_inside_the_repository(name):
    text = (ROOT / name).read_text()
    assert not re.findall(r"\.\./shared|/work/|/root/|/tmp/", text), "a path outside the repository"
    assert not re.findall(PAST, text, re.I), "talk of past work sessions"
    assert not re.findall(STORY, text), "a story of the work, not what was measured"


@pytest.mark.parametrize("name", LINKED_DOCS)
def test_linked_docs_name_no_path_outside_the_repository(name):
    """Their commands may write to /tmp, but name nothing beside the checkout (../shared, the GPU
    harness's .device/) and tell no story of work sessions."""
    text = (ROOT / name).read_text()
    assert not re.findall(r"\.\./|\.device/", text), "a path outside the repository"
    assert not re.findall(PAST, text, re.I), "talk of past work sessions"
    assert not re.findall(STORY, text), "a story of the work, not what was measured"


def test_every_measurement_file_has_its_command():
    """docs/measurements/README.md names every data file beside it, and only files that exist."""
    assert measurements_index.problems() == []


def test_documented_commands_name_files_that_exist():
    """A path a doc names (benchmarks/unstage_flash_attn.sh had moved to tools/gpu_machine/), and
    the committed traces an analyze command's glob takes: traces only (`traces/*` caught
    traces/README.md and the probe)."""
    path = re.compile(
        r"\b(?:benchmarks|tools|docs|tests|profiling|engine|costmodel|bubblelab|notebooks|traces)/"
        r"[\w./-]+\.(?:py|sh|md|json|ipynb|png|xml|gz)\b"
    )
    missing = [
        f"{name}: {found}"
        for name in (*USER_DOCS, *LINKED_DOCS)
        for found in path.findall((ROOT / name).read_text())
        if not (ROOT / found).exists() and "*" not in found
    ]
    assert not missing, missing
    for name in (*USER_DOCS, *LINKED_DOCS):
        text = " ".join((ROOT / name).read_text().split())  # a command wrapped over two lines
        for pattern in re.findall(r"bubblelab analyze (traces/[^<\s]*?)[`\s]", text):
            files = glob.glob(pattern, root_dir=ROOT)
            # traces only: not traces/README.md, an index.json or the nsys probe
            assert files and all(f.endswith(".sqlite.gz") for f in files), (name, pattern)
