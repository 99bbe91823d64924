"""``fusedops fuse``: fuse the GroupNorm patterns of any ONNX model into fusedops nodes."""

from __future__ import annotations

import sys

from ..api import fuse
from .common import add_force_flag, progress

NAME = "fuse"
HELP = "fuse GroupNorm patterns of any ONNX model into fusedops nodes"


def add_arguments(s) -> None:
    s.add_argument("input", help="the ONNX model to fuse (never modified)")
    s.add_argument("output", help="the fused ONNX model to write (one file; its tensors in OUTPUT.data when the "
                   "input keeps them outside)")
    add_force_flag(s, "OUTPUT")
    s.add_argument("--report", metavar="FILE.json", help="write the fusion report (every GroupNorm: what it became "
                   "or why it was left) as JSON")
    s.add_argument("--strict", action="store_true", help="exit with status 1 when any GroupNorm is left unfused "
                   "(the output is still written)")


def run(a) -> int:
    with progress(f"fusing {a.input}"):
        result = fuse(a.input, a.output, force=a.force, report=a.report)
    unfused = result.report.unfused
    for e in unfused[:20]:
        print(f"fusedops: warning: {e.site} left unfused: {e.reason}", file=sys.stderr)
    if len(unfused) > 20:
        print(f"fusedops: warning: ... and {len(unfused) - 20} more (see --report)", file=sys.stderr)
    data = f" (tensors in {result.data_path})" if result.data_path else ""
    print(f"{result.report.summary()}; wrote {result.path}{data}")
    if a.strict and unfused:
        print(f"fusedops: warning: --strict: {len(unfused)} GroupNorm(s) left unfused", file=sys.stderr)
        return 1
    return 0
