"""Names the CLI offers before anything heavy is imported (``fusedops --help`` must not import torch);
``verify.BACKENDS`` is built in this order and checked against it."""

BACKEND_NAMES = ("ort-cpu-functions", "ort-cpu", "ort-cuda", "torch-cpu", "torch-cuda", "trt")
