"""``fusedops verify``: one reference model on one backend against eager PyTorch, or any ONNX file fused (fusedops
library) against unfused (plain ONNX Runtime) and, with ``--torch``, against a PyTorch module."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..api import verify
from ..errors import UsageError
from ..workflows.names import BACKEND_NAMES, is_onnx_file_argument
from .common import non_negative_float, positive_int, progress

NAME = "verify"
HELP = "run a model fused and compare it: a reference model vs eager PyTorch, or an ONNX file vs itself unfused"


def add_arguments(s) -> None:
    s.add_argument("model", help="reference model key or number (1-4), or an ONNX file (PATH.onnx): its fused form on "
                                 "the fusedops library vs the model unfused on plain ONNX Runtime (CPU); a fused file "
                                 "is compared with its own function bodies")
    s.add_argument("--backend", choices=list(BACKEND_NAMES), default="ort-cpu",
                   help="where the fused model runs (default ort-cpu; an ONNX file: ort-cpu or ort-cuda)")
    s.add_argument("--size", choices=["small", "bench"], default="small",
                   help="the reference model's size (default small; model keys only)")
    s.add_argument("--batch", type=positive_int, default=None,
                   help="batch of the random input (default: the reference model's own; an ONNX file: 2, for a "
                        "symbolic first dimension)")
    s.add_argument("--shapes", default=None, metavar="NAME:1x3x32x32,...",
                   help="ONNX file: shapes of inputs with symbolic dimensions besides the batch (trtexec syntax)")
    s.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    s.add_argument("--torch", default=None, metavar="MODULE:CALLABLE",
                   help="ONNX file: also compare with CALLABLE() (a torch.nn.Module from MODULE, importable from the "
                        "current folder or PYTHONPATH) run in float32 on the CPU on the same inputs")
    s.add_argument("--atol", type=non_negative_float, default=None,
                   help="absolute tolerance (default: 1e-4 for float32 on the CPU, 1e-2 for TF32 GPU backends, "
                        "ort-cuda and float16 / bfloat16 models)")
    s.add_argument("--rtol", type=non_negative_float, default=None,
                   help="relative tolerance (default: as --atol)")


def run(a) -> int:
    if a.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {a.seed}")
    if not is_onnx_file_argument(a.model):
        for flag, value in (("--shapes", a.shapes), ("--torch", a.torch)):
            if value is not None:
                raise UsageError(f"{flag} applies to an ONNX file (PATH.onnx), not to model key {a.model!r}")
        from ..workflows.demo import render_table  # lazy: torch; --help imports none

        with progress(f"exporting, fusing and running model {a.model} on {a.backend}"):
            r = verify(a.model, backend=a.backend, size=a.size, batch=a.batch, seed=a.seed, atol=a.atol,
                       rtol=a.rtol)
        Console().print(render_table([r], a.size))
        return 0 if r.ok else 1
    with progress(f"fusing and running {a.model} on {a.backend}"):
        r = verify(a.model, backend=a.backend, batch=a.batch, shapes=a.shapes, seed=a.seed, torch_module=a.torch,
                   atol=a.atol, rtol=a.rtol)
    print_onnx_result(Console(), r)
    return 0 if r.ok else 1


def print_onnx_result(console, r) -> None:
    """A summary, then one table per comparison: output, shape, max abs error, allclose, pass / FAIL."""
    how = "fused here from the input (which had none)" if r.fused_here else "in the input"
    console.print(f"{escape(r.model)}: {r.fused_nodes} fusedops node(s), {how}; inputs "
                  + ", ".join(f"{escape(n)} {t} {'x'.join(map(str, s)) or 'scalar'}" for n, (s, t) in r.inputs.items())
                  + f" (random normal, seed {r.seed}); atol {r.atol:g}, rtol {r.rtol:g}", soft_wrap=True)
    if r.nothing_fused:
        console.print("nothing was fused: the library ran no fusedops node, so this compares onnxruntime with itself")
    for c in r.comparisons:
        table = Table(title=escape(f"{c.candidate} vs {c.reference}"))
        for col, kw in [("output", {}), ("shape", {}), ("max abs error", {"justify": "right"}),
                        ("allclose", {}), ("result", {}),
                        ("note", {"overflow": "fold"})]:
            table.add_column(col, **kw)
        for o in c.outputs:
            table.add_row(escape(o.name), "" if o.shape is None else "x".join(map(str, o.shape)) or "scalar",
                          "" if o.max_abs_err is None else f"{o.max_abs_err:.2e}", "yes" if o.allclose else "no",
                          "[green]pass[/]" if o.ok else "[red]FAIL[/]", escape(o.note))
        console.print(table)
        if c.note:
            console.print(f"[red]FAIL[/]: {escape(c.note)}")
    console.print("[green]all outputs match[/]" if r.ok else "[red]verify failed[/]")
