"""The `fusedops` console script: one module per command (NAME, HELP, add_arguments, run), each mirroring a
function of the Python API (fusedops.api). The top layer: nothing in the package imports it (import-linter checks).

Building the parser imports no torch, onnx or runtime (``fusedops --help`` in well under a second); each command
imports what it runs inside ``run``.
"""

from __future__ import annotations

import sys

from ..errors import FusedopsError
from ..version import __version__
from . import bench, build, build_native, demo, export, fuse, loadtest, repo, serve, verify
from .common import Parser

COMMANDS = (export, fuse, demo, verify, bench, build_native, build, serve, repo, loadtest)


def make_parser() -> Parser:
    p = Parser(prog="fusedops", description="Fused GEMM / ConvTranspose + GroupNorm + activation operators for "
                                            "PyTorch, ONNX Runtime and TensorRT.")
    p.add_argument("--version", action="version", version=f"fusedops {__version__}",
                   help="print the fusedops version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        s = sub.add_parser(command.NAME, help=command.HELP, description=command.HELP)
        command.add_arguments(s)
        s.set_defaults(fn=command.run)
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
