"""``fusedops build-native``: configure and build the native libraries (development; CMake)."""

from __future__ import annotations

from ..plugins import native
from .common import progress

NAME = "build-native"
HELP = "build the native libraries (CUDA kernels, ORT and TensorRT adapters)"


def add_arguments(s) -> None:
    s.add_argument("--cuda", choices=["auto", "on", "off"], default="auto",
                   help="build the CUDA kernels: auto (when nvcc is found), on (required), off")
    s.add_argument("--verbose", action="store_true", help="show CMake's and the compiler's output")


def run(a) -> int:
    with progress("building the native libraries", enabled=not a.verbose):
        path = native.build(cuda=a.cuda, verbose=a.verbose)
    print(f"native libraries in {path}")
    from ..plugins import abi  # lazy: loads torch and the library just built; --help imports none

    print(f"CPU GEMM: {abi.cpu_blas()}")  # the BLAS the CPU GemmGroupNormAct loads (plugins/cpu_blas.py's choice)
    return 0
