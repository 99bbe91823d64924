"""``fusedops build``: a TensorRT engine from a fused ONNX model (flags as trtexec spells them where it has one)."""

from __future__ import annotations

import sys

from .common import add_force_flag, add_precision_flags

NAME = "build"
HELP = "build a TensorRT engine from a fused ONNX model"
PRECISIONS = ("tf32", "fp32", "fp16", "bf16")  # trt_build.builder.PRECISIONS (a test keeps them equal)
DEFAULT_MAX_BATCH = 1024  # trt_build.builder.DEFAULT_MAX_BATCH
DEFAULT_WORKSPACE_MB = 4096  # trt_build.builder.DEFAULT_WORKSPACE_MB


def add_arguments(parser) -> None:
    parser.add_argument("onnx", help="ONNX model (fused: fusedops nodes become TensorRT plugins)")
    parser.add_argument("--out", "--engine", "--saveEngine", dest="engine", required=True,
                        help="output engine file (.plan); --engine and trtexec's --saveEngine are the same")
    add_precision_flags(parser, PRECISIONS, default="tf32")
    parser.add_argument("--min-batch", type=int, default=1, help="smallest batch of the optimisation profile")
    parser.add_argument("--opt-batch", type=int, default=None,
                        help="batch TensorRT tunes for (default: max batch)")
    parser.add_argument("--max-batch", type=int, default=None,
                        help=f"largest batch of the optimisation profile (default {DEFAULT_MAX_BATCH})")
    parser.add_argument("--minShapes", "--min-shapes", dest="min_shapes", default=None,
                        help="trtexec style: name:1x3x32x32[,name2:...]")
    parser.add_argument("--optShapes", "--opt-shapes", dest="opt_shapes", default=None,
                        help="trtexec style, as --minShapes")
    parser.add_argument("--maxShapes", "--max-shapes", dest="max_shapes", default=None,
                        help="trtexec style, as --minShapes")
    parser.add_argument("--workspace-mb", type=int, default=DEFAULT_WORKSPACE_MB, help="workspace limit in MiB")
    parser.add_argument("--timing-cache", "--timingCacheFile", dest="timing_cache", default=None,
                        help="timing cache file (read if present, then updated)")
    parser.add_argument("--cache-dir", default=None, help="engine cache folder")
    parser.add_argument("--plugin-library", default=None,
                        help="libfusedops_trt.so (default: $FUSEDOPS_TRT_PLUGIN, else the native library folder)")
    add_force_flag(parser, "the engine, ignoring the engine cache,")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(a) -> int:
    from ..trt_build import builder  # lazy: onnx; --help imports none

    r = builder.build_engine(
        a.onnx, a.engine, precision=a.precision, min_batch=a.min_batch, opt_batch=a.opt_batch,
        max_batch=a.max_batch, workspace_mb=a.workspace_mb, timing_cache=a.timing_cache,
        cache_dir=a.cache_dir, plugin_library=a.plugin_library, force=a.force,
        progress=not a.no_progress, shapes=builder.shapes_from_args(a.min_shapes, a.opt_shapes, a.max_shapes))
    how = "taken from the engine cache" if r.cached else f"built in {r.seconds:.1f} s"
    print(f"engine {r.engine_path} ({how}, precision {r.precision})")
    for note in r.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
