"""``fusedops bench``: GPU timings of the fused models (``--latency``: per-call latency); JSON + PNG under
``bench/results/`` by default."""

from __future__ import annotations

from ..api import bench
from .common import add_force_flag, add_precision_flags

NAME = "bench"
HELP = "GPU benchmark of the fused models against eager, compile and the GEMM floor"
PRECISIONS = ("fp32", "tf32", "bf16")  # fusedops.benchmark.timing.PRECISIONS (a test keeps them equal)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")  # benchmark.latency.COMPILE_MODES


def add_arguments(ap) -> None:
    ap.add_argument("--models", nargs="*", default=None, help="subset of models (default: all four)")
    ap.add_argument("--size", choices=["small", "bench"], default="bench", help="model size (default bench)")
    add_precision_flags(ap, ("tf32", "fp32", "bf16"), default=None, dest="precisions", many=True,
                        old="--precisions")
    ap.add_argument("--repeats", type=int, default=20, help="timed runs per row (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs before each row")
    ap.add_argument("--input-sets", type=int, default=3, help="inputs rotated between runs (L2 cold)")
    ap.add_argument("--out-dir", default=None, help="folder for the JSON and PNG (default: a new folder under "
                    "bench/results/)")
    add_force_flag(ap, "the JSON / PNG of an earlier run in --out-dir")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph replay rows of the fused model")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune")
    ap.add_argument("--compile-precisions", nargs="*", default=["fp32", "tf32"], choices=list(PRECISIONS),
                    help="precisions that get torch.compile rows (each compile costs tens of seconds)")
    g = ap.add_argument_group("latency (--latency: per-call synchronous, enqueue, back-to-back and graph times)")
    g.add_argument("--latency", action="store_true",
                   help="time what a serving caller sees per call at small batches instead")
    g.add_argument("--batches", nargs="*", default=["1", "16", "ref"], help="batch sizes; 'ref' = the model's own")
    g.add_argument("--calls", type=int, default=200, help="timed calls per variant (median)")
    g.add_argument("--compile-modes", nargs="*", default=list(COMPILE_MODES),
                   help="torch.compile modes timed with --latency")
    g.add_argument("--compile-batches", nargs="*", default=None,
                   help="batches that get torch.compile rows with --latency (default: all)")
    g.add_argument("--no-ort", action="store_true", help="skip the ONNX Runtime rows")


def selected_precisions(a) -> list[str]:
    """The precisions the flags chose, in the bench's order (fp32, tf32, bf16); none chosen: all of them."""
    chosen = set(a.precisions or PRECISIONS)
    return [p for p in PRECISIONS if p in chosen]


def run(a) -> int:
    """Run with parsed flags; FusedopsError propagates (the CLI prints it on one line)."""
    precisions = selected_precisions(a)
    if a.latency:
        from ..benchmark.latency import run_latency  # lazy: torch; --help imports none

        lat = run_latency(models=a.models, precisions=precisions, batches=a.batches,
                          compile_modes=[] if a.no_compile else a.compile_modes, compile_batches=a.compile_batches,
                          calls=a.calls, use_ort=not a.no_ort, out_dir=a.out_dir)
        return 1 if lat.errors else 0

    report = bench(models=a.models, size=a.size, repeats=a.repeats, warmup=a.warmup, out_dir=a.out_dir,
                   precisions=precisions, input_sets=a.input_sets, use_compile=not a.no_compile,
                   compile_mode=a.compile_mode, compile_precisions=a.compile_precisions,
                   use_graphs=not a.no_graphs, force=a.force)
    return 1 if report.errors else 0
