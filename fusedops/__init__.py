"""fusedops: fused GEMM / ConvTranspose + GroupNorm + activation operators for PyTorch, ONNX Runtime and TensorRT.

The Python API mirrors the ``fusedops`` console script: ``fusedops.export``, ``fusedops.fuse``, ``fusedops.demo``,
``fusedops.verify``, ``fusedops.bench``, ``fusedops.build``, ``fusedops.build_native``.
"""

from __future__ import annotations

import sys
import types

__version__ = "0.1.0"

from .api import bench, build, build_native, demo, export, fuse, verify  # noqa: E402

__all__ = ["__version__", "export", "fuse", "demo", "verify", "bench", "build", "build_native"]


class _Package(types.ModuleType):
    """Keeps the API functions ``demo``, ``verify`` and ``bench`` bound to the package: importing the submodules of
    the same names (``fusedops.demo`` ...) would otherwise replace them with the modules, and ``fusedops.verify(...)``
    would fail with "'module' object is not callable" after a demo. The submodules stay in ``sys.modules``
    (``from fusedops.verify import BACKENDS``, ``importlib.import_module("fusedops.bench")``)."""

    def __setattr__(self, name, value):
        if name in ("demo", "verify", "bench") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
