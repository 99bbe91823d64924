"""fusedops: fused GEMM / ConvTranspose + GroupNorm + activation operators for PyTorch, ONNX Runtime and TensorRT.

The Python API mirrors the ``fusedops`` console script: ``fusedops.export``, ``fusedops.fuse``, ``fusedops.demo``,
``fusedops.verify``, ``fusedops.bench``, ``fusedops.build``, ``fusedops.build_native``. No submodule has the name
of an API function (the runs live in ``fusedops.workflows`` and ``fusedops.benchmark``), so importing one never
replaces a function (docs/layout.md).
"""

from __future__ import annotations

from .api import bench, build, build_native, demo, export, fuse, verify
from .version import __version__

__all__ = ["__version__", "export", "fuse", "demo", "verify", "bench", "build", "build_native"]
