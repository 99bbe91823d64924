"""``fusedops export``: export a reference model to ONNX and fuse it."""

from __future__ import annotations

from ..api import export
from .common import add_force_flag, progress

NAME = "export"
HELP = "export a reference model to ONNX and fuse it"


def add_arguments(s) -> None:
    s.add_argument("model", help="model key or number (1-4)")
    s.add_argument("--out", required=True, help="output .onnx path (one file)")
    s.add_argument("--size", choices=["small", "bench"], default="small", help="the model's size (default small)")
    s.add_argument("--static-batch", action="store_true", help="export with a fixed batch dimension")
    add_force_flag(s, "OUT")


def run(a) -> int:
    with progress(f"exporting and fusing model {a.model}"):
        path = export(a.model, a.out, size=a.size, dynamic_batch=not a.static_batch, force=a.force)
    print(f"wrote {path}")
    return 0
