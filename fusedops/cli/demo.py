"""``fusedops demo``: export, fuse and run every reference model on every backend available here."""

from __future__ import annotations

from ..api import demo
from ..workflows.names import BACKEND_NAMES
from .common import add_force_flag, positive_int

NAME = "demo"
HELP = "export, fuse and run every reference model on every backend available here"


def add_arguments(s) -> None:
    s.add_argument("--models", nargs="*", help="subset of models (default: all four)")
    s.add_argument("--backends", nargs="*", choices=list(BACKEND_NAMES), help="subset of backends (default: all)")
    s.add_argument("--size", choices=["small", "bench"], default=None,
                   help="default: bench with a CUDA GPU, small otherwise")
    s.add_argument("--out-dir", default=None, help="keep the ONNX files and a JSON report in this folder")
    add_force_flag(s, "files of an earlier run in --out-dir")
    s.add_argument("--repeats", type=positive_int, default=10, help="timed runs per backend (median)")


def run(a) -> int:
    results = demo(models=a.models or None, backends=a.backends or None, size=a.size, out_dir=a.out_dir,
                   repeats=a.repeats, force=a.force)
    return 1 if any(r.ok is False for r in results) else 0
