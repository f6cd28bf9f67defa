"""Numbers in the user docs cannot drift: their tables are generated from the data they describe
(tools/docs/generated.py) and must match it, and their commands run."""

import glob
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tools.docs import generated

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = (
    "README.md",
    "traces/README.md",
    "costmodel/README.md",
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


@pytest.mark.parametrize("name", USER_DOCS)
def test_user_docs_stay_inside_the_repository(name):
    text = (ROOT / name).read_text()
    assert not re.findall(r"\.\./shared|/work/|/root/|/tmp/", text), "a path outside the repository"
    # "session 2", "this session": how the work went, not what a user needs (an nsys session is)
    past = r"\bsessions? \d|\bsession-\d|\b(?:this|last|previous|next|earlier) session"
    assert not re.findall(past, text, re.I), "talk of past work sessions"
