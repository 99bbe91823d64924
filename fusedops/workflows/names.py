"""Names the CLI offers before anything heavy is imported (``fusedops --help`` must not import torch);
``verify.BACKENDS`` is built in this order and checked against it."""

import os

BACKEND_NAMES = ("ort-cpu-functions", "ort-cpu", "ort-cuda", "torch-cpu", "torch-cuda", "trt")

# The backends that verify an ONNX file: the fusedops library on ONNX Runtime's CPU or CUDA EP.
ONNX_BACKENDS = ("ort-cpu", "ort-cuda")


def is_onnx_file_argument(model) -> bool:
    """``verify``'s MODEL is an ONNX file (a path object, or a name ending in .onnx), else a reference-model key."""
    return isinstance(model, os.PathLike) or (isinstance(model, str) and model.lower().endswith(".onnx"))
