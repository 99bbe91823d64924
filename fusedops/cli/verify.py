"""``fusedops verify``: one reference model on one backend against eager PyTorch."""

from __future__ import annotations

from ..workflows.names import BACKEND_NAMES
from .common import non_negative_float, positive_int, progress

NAME = "verify"
HELP = "run one model on one backend and compare with eager PyTorch"


def add_arguments(s) -> None:
    s.add_argument("model", help="reference model key or number (1-4)")
    s.add_argument("--backend", choices=list(BACKEND_NAMES), default="ort-cpu",
                   help="where the fused model runs (default ort-cpu)")
    s.add_argument("--size", choices=["small", "bench"], default="small", help="the model's size (default small)")
    s.add_argument("--batch", type=positive_int, default=None, help="batch of the random input (default: the "
                   "model's own)")
    s.add_argument("--atol", type=non_negative_float, default=None,
                   help="absolute tolerance (default: by the backend's precision, 1e-4 FP32 / 1e-2 TF32)")
    s.add_argument("--rtol", type=non_negative_float, default=None,
                   help="relative tolerance (default: by the backend's precision, as --atol)")


def run(a) -> int:
    from rich.console import Console  # lazy, with the API below: --help never imports torch

    from ..api import verify
    from ..workflows.demo import render_table

    with progress(f"exporting, fusing and running model {a.model} on {a.backend}"):
        r = verify(a.model, backend=a.backend, size=a.size, batch=a.batch, atol=a.atol, rtol=a.rtol)
    Console().print(render_table([r], a.size))
    return 0 if r.ok else 1
