"""Files of one concern: no tracked file over 500 lines.

Everything the repository tracks is checked except what is listed in ``EXCLUDED`` below, the one place where
exceptions live (generated files, vendored data, and files another branch is splitting at the same time). A file
that outgrows the limit is split by concern, not excluded.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fusedops.spec import generate

REPO_ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 500

# Written by `python -m fusedops.spec.generate` from the op spec: their length follows the spec, nobody edits them.
GENERATED = frozenset(generate.OUTPUTS)

# Data, not source: byte-exact fuzzer inputs kept as regression cases, and benchmark runs exactly as `fusedops bench`
# wrote them (bench/results/README.md: the runs a decision rests on are committed).
VENDORED_PREFIXES = ("tests/native/fuzz_regressions/", "bench/results/")

EXCLUDED = GENERATED

# Folders that hold no tracked source (used only when the tree is not a git checkout).
_UNTRACKED_DIRS = {".git", ".venv", "build", "third_party", "__pycache__", ".pytest_cache", ".hypothesis"}


def tracked_files() -> list[str]:
    """Repository-relative paths of the tracked files (git), or of every file outside build and dependency folders
    when the tree is an export without git metadata."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for dirpath, dirnames, filenames in os.walk(REPO_ROOT):
            dirnames[:] = [d for d in dirnames if d not in _UNTRACKED_DIRS and not d.endswith(".egg-info")]
            paths += [str((Path(dirpath) / f).relative_to(REPO_ROOT)) for f in filenames]
        return paths


def line_count(path: Path) -> int | None:
    """Lines of a text file; None for a binary one (a NUL byte or not UTF-8)."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return len(text.splitlines())


def checked_files() -> list[str]:
    return [p for p in tracked_files()
            if p not in EXCLUDED and not p.startswith(VENDORED_PREFIXES) and (REPO_ROOT / p).is_file()]


def test_no_file_over_the_limit():
    over = {}
    for rel in checked_files():
        n = line_count(REPO_ROOT / rel)
        if n is not None and n > MAX_LINES:
            over[rel] = n
    assert not over, (f"files over {MAX_LINES} lines (split them by concern): "
                      + ", ".join(f"{p} ({n})" for p, n in sorted(over.items())))


def test_the_check_sees_the_source_tree():
    # Guards the test above against passing vacuously (e.g. git listing nothing): the main sources are checked.
    files = set(checked_files())
    for must in ("plugins/csrc/cuda/gn_plan.cu", "plugins/ort/fusedops_ort.cc", ".ci/run",
                 "scripts/dev.sh"):
        assert must in files, must
    assert len(files) > 100


def test_exclusions_name_existing_files():
    # A stale exclusion would silently exempt a file that later reappears under that name.
    missing = sorted(p for p in EXCLUDED if not (REPO_ROOT / p).is_file())
    assert not missing, f"excluded files that do not exist (remove them from EXCLUDED): {missing}"
