"""Which BLAS the native CPU GEMM (GemmGroupNormAct on the CPU) should load: the policy of the Python layer.

    default_choice() -> str | None     what to pass to fusedops_set_cpu_blas / the ORT config entry fusedops.cpu_blas
    scipy_openblas_library() -> str | None   the scipy-openblas32 wheel's library, when that package is installed

Order: ``FUSEDOPS_CPU_BLAS`` (a library path, or ``eigen`` for the built-in GEMM; read here, never in native code),
else the ``scipy-openblas32`` wheel's OpenBLAS (extra ``cpu-blas``; a private copy with ``scipy_``-prefixed symbols,
so setting its thread count to 1 touches no other BLAS in the process), else None: the library's own search of
system sonames, then Eigen. See docs/exporter.md, "CPU kernels".
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

ENV = "FUSEDOPS_CPU_BLAS"


def scipy_openblas_library() -> str | None:
    """Path of scipy-openblas32's shared library, or None when the package is not installed."""
    # find_spec, not import: the package's __init__ is light, but a missing package must cost nothing.
    spec = importlib.util.find_spec("scipy_openblas32")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib_dir = Path(next(iter(spec.submodule_search_locations))) / "lib"
    libs = sorted(lib_dir.glob("libscipy_openblas*.so*"))
    return str(libs[0]) if libs else None


def default_choice() -> str | None:
    """The BLAS to name to the native library: ``$FUSEDOPS_CPU_BLAS``, else scipy-openblas32's, else None."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return env
    return scipy_openblas_library()
