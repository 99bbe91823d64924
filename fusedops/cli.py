"""The `fusedops` console script. Each subcommand mirrors a function of the Python API (fusedops.api)."""

from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import FusedopsError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one line (``fusedops: error: ...``, exit 2) instead of the usage
    text plus the error; ``--help`` still shows the usage."""

    def error(self, message: str):
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        self.exit(2, f"fusedops: error: {sub}{message}\n")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def _cmd_export(a):
    from .api import export
    path = export(a.model, a.out, size=a.size, dynamic_batch=not a.static_batch, force=a.force)
    print(f"wrote {path}")


def _cmd_fuse(a):
    from .api import fuse
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


def _cmd_demo(a):
    from .api import demo
    results = demo(models=a.models or None, backends=a.backends or None, size=a.size, out_dir=a.out_dir,
                   repeats=a.repeats, force=a.force)
    return 1 if any(r.ok is False for r in results) else 0


def _cmd_verify(a):
    from rich.console import Console

    from .api import verify
    from .demo import render_table
    r = verify(a.model, backend=a.backend, size=a.size, batch=a.batch)
    Console().print(render_table([r], a.size))
    return 0 if r.ok else 1


def _cmd_bench(a):
    from .bench import run_from_args
    return run_from_args(a)


def _cmd_build_native(a):
    from .plugins import native
    path = native.build(cuda=a.cuda, verbose=a.verbose)
    print(f"native libraries in {path}")


def _cmd_build(a):
    from .trt_build import builder
    r = builder.build_from_args(a)
    how = "taken from the engine cache" if r.cached else f"built in {r.seconds:.1f} s"
    print(f"engine {r.engine_path} ({how}, precision {r.precision})")
    for note in r.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _cmd_serve(a):
    from .serve.commands import run_serve
    return run_serve(a)


def _cmd_repo(a):
    from .serve.commands import run_repo
    return run_repo(a)


def _cmd_loadtest(a):
    from .serve.commands import run_loadtest
    return run_loadtest(a)


def make_parser() -> argparse.ArgumentParser:
    from .verify import BACKENDS

    p = _Parser(prog="fusedops", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"fusedops {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("export", help="export a reference model to ONNX and fuse it")
    s.add_argument("model", help="model key or number (1-4)")
    s.add_argument("--out", required=True, help="output .onnx path")
    s.add_argument("--size", choices=["small", "bench"], default="small")
    s.add_argument("--static-batch", action="store_true", help="export with a fixed batch dimension")
    s.add_argument("--force", action="store_true", help="overwrite OUT if it exists (never the input)")
    s.set_defaults(fn=_cmd_export)

    s = sub.add_parser("fuse", help="fuse GroupNorm patterns of any ONNX model into fusedops nodes")
    s.add_argument("input")
    s.add_argument("output")
    s.add_argument("--force", action="store_true", help="overwrite OUTPUT if it exists (never the input)")
    s.add_argument("--report", metavar="FILE.json", help="write the fusion report (every GroupNorm: what it became "
                   "or why it was left) as JSON")
    s.add_argument("--strict", action="store_true", help="exit with status 1 when any GroupNorm is left unfused "
                   "(the output is still written)")
    s.set_defaults(fn=_cmd_fuse)

    s = sub.add_parser("demo", help="export, fuse and run every reference model on every backend available here")
    s.add_argument("--models", nargs="*", help="subset of models (default: all four)")
    s.add_argument("--backends", nargs="*", choices=list(BACKENDS), help="subset of backends (default: all)")
    s.add_argument("--size", choices=["small", "bench"], default=None,
                   help="default: bench with a CUDA GPU, small otherwise")
    s.add_argument("--out-dir", default=None, help="keep the ONNX files and a JSON report here")
    s.add_argument("--force", action="store_true", help="replace files of an earlier run in --out-dir")
    s.add_argument("--repeats", type=_positive_int, default=10)
    s.set_defaults(fn=_cmd_demo)

    s = sub.add_parser("verify", help="run one model on one backend and compare with eager PyTorch")
    s.add_argument("model")
    s.add_argument("--backend", choices=list(BACKENDS), default="ort-cpu")
    s.add_argument("--size", choices=["small", "bench"], default="small")
    s.add_argument("--batch", type=_positive_int, default=None)
    s.set_defaults(fn=_cmd_verify)

    s = sub.add_parser("bench", help="GPU benchmark of the fused models against eager, compile and the GEMM floor")
    from .bench import add_arguments as add_bench_arguments
    add_bench_arguments(s)
    s.add_argument("--force", action="store_true", help="replace bench.json / bench.png of an earlier run")
    s.set_defaults(fn=_cmd_bench)

    s = sub.add_parser("build-native", help="build the native libraries (CUDA kernels, ORT and TensorRT adapters)")
    s.add_argument("--cuda", choices=["auto", "on", "off"], default="auto")
    s.add_argument("--verbose", action="store_true")
    s.set_defaults(fn=_cmd_build_native)

    s = sub.add_parser("build", help="build a TensorRT engine from a fused ONNX model")
    try:
        from .trt_build import builder
        builder.add_build_arguments(s)
    except (ImportError, AttributeError):  # builder not importable: the command explains itself when run
        s.add_argument("onnx")
        s.add_argument("--engine", required=True)
    s.set_defaults(fn=_cmd_build)

    from .serve import commands as serve_commands
    s = sub.add_parser("serve", help="serve a fused model on Triton (PyTriton), KServe v2 over HTTP and gRPC")
    serve_commands.add_serve_arguments(s)
    s.set_defaults(fn=_cmd_serve)
    s = sub.add_parser("repo", help="write a Triton model repository (onnxruntime or tensorrt_plan) for tritonserver")
    serve_commands.add_repo_arguments(s)
    s.set_defaults(fn=_cmd_repo)
    s = sub.add_parser("loadtest", help="load-test a served model on loopback, every response checked (JSON + PNG)")
    serve_commands.add_loadtest_arguments(s)
    s.set_defaults(fn=_cmd_loadtest)
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        rc = args.fn(args)
    except FusedopsError as e:
        print(f"fusedops: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fusedops: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
