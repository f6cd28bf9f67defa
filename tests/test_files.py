"""Nothing lost: every file bubblelab writes goes through files.write_atomic, and output paths are
checked before any work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.core.files import check_output_path, write_atomic

ROOT = Path(__file__).parents[1]


def test_write_atomic_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "results.json"
    assert write_atomic(target, "first") == target
    write_atomic(target, b"second")
    assert target.read_text() == "second"
    write_atomic(target, lambda p: p.write_text("third"))
    assert target.read_text() == "third"
    assert sorted(p.name for p in target.parent.iterdir()) == ["results.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("old")

    def dies_midway(path: Path) -> None:
        path.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, dies_midway)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_writing_over_a_directory_is_one_error(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(BubblelabError, match="cannot write"):
        write_atomic(tmp_path / "taken", "x")


def test_output_paths_are_checked_before_work(tmp_path):
    assert check_output_path(tmp_path / "new" / "out.json", "--json") == tmp_path / "new/out.json"
    with pytest.raises(BubblelabError, match="--json .* is a directory"):
        check_output_path(tmp_path, "--json")
    (tmp_path / "file").write_text("")
    with pytest.raises(BubblelabError, match="is not a directory"):
        check_output_path(tmp_path / "file" / "out.json", "--json")


# Product code that writes files: every write goes through write_atomic. Not outputs: temporary
# decompressed copies of traces (ingest), a child's live log (peer_nanovllm).
# A figure saved to a path (not to a buffer, not inside a write_atomic callback) counts too.
RAW_WRITE = re.compile(
    r"\.write_text\(|\.write_bytes\(|open\([^)]*['\"][wa]b?['\"]|\.to_parquet\(|\.to_csv\("
    r"|\.savefig\((?!buf|partial)"
)
ALLOWED = {"core/files.py", "profiling/ingest.py", "benchmarks/peer_nanovllm.py"}


def test_every_write_goes_through_write_atomic():
    offenders = []
    for folder in ("bubblelab", "engine", "profiling", "costmodel", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if RAW_WRITE.search(line):
                    offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "write through bubblelab.core.files.write_atomic:\n" + "\n".join(
        offenders
    )
