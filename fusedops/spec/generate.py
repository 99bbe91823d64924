"""Write every file generated from the op spec, or check that they are current.

    python -m fusedops.spec.generate           rewrite the generated files that differ from the spec
    python -m fusedops.spec.generate --check   exit 1 naming the stale files, change nothing

Run it from a checkout (it reads fusedops/spec/ops.toml, Python 3.11+) after editing the spec, then rebuild the
native libraries (`fusedops build-native`). The generated files are committed, so a checkout builds without Python.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import emit_c, emit_docs, emit_py
from .load import SPEC_PATH, SpecError, load

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = {
    "fusedops/spec/tables.py": emit_py.tables_py,
    "plugins/include/fusedops/fusedops_spec.h": emit_c.spec_header,
    "plugins/csrc/core/step_formulas.h": emit_c.formulas_header,
    "docs/ops.md": emit_docs.ops_md,
}


def render(spec_path: Path = SPEC_PATH) -> dict[str, str]:
    """{repository-relative path: content} of every generated file."""
    spec = load(spec_path)
    return {path: fn(spec) for path, fn in OUTPUTS.items()}


def differing(files: dict[str, str], root: Path = REPO_ROOT) -> list[str]:
    """The paths of ``files`` whose file under ``root`` is missing or has other content."""
    return [p for p, text in files.items() if not (root / p).is_file() or (root / p).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusedops.spec.generate", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale; write nothing")
    args = ap.parse_args(argv)
    if not SPEC_PATH.is_file():
        print(f"fusedops.spec.generate: error: {SPEC_PATH.name} not found: run it from a checkout", file=sys.stderr)
        return 2
    try:
        files = render()
    except SpecError as e:
        print(f"fusedops.spec.generate: error: {e}", file=sys.stderr)
        return 2
    changed = differing(files)
    if args.check:
        if changed:
            print("stale generated files (run `python -m fusedops.spec.generate`): " + ", ".join(changed))
            return 1
        print(f"all {len(files)} generated files are current")
        return 0
    for p in changed:
        (REPO_ROOT / p).write_text(files[p])
        print(f"wrote {p}")
    if not changed:
        print(f"all {len(files)} generated files are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
