"""fusedops: fused GEMM / ConvTranspose + GroupNorm + activation operators for PyTorch, ONNX Runtime and TensorRT.

The Python API mirrors the ``fusedops`` console script: ``fusedops.export``, ``fusedops.fuse``, ``fusedops.demo``,
``fusedops.verify``, ``fusedops.bench``, ``fusedops.build``, ``fusedops.build_native``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .api import bench, build, build_native, demo, export, fuse, verify  # noqa: E402

__all__ = ["__version__", "export", "fuse", "demo", "verify", "bench", "build", "build_native"]
