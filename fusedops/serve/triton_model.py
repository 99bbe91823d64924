"""The Triton Python-backend model that `fusedops serve --server tritonserver` (and `fusedops repo --backend python`)
put in a model repository as ``<model>/1/model.py``.

It runs inside the backend's stub process, which ``tritonserver`` starts and talks to through shared memory. The
fused model is loaded there, so a batch goes client → tritonserver → stub → backend and back: PyTriton's extra hop
(its stub forwarding every batch over ZeroMQ to a separate serving process, measured at ≈ 3 ms a batch on the CPU
machine, docs/serving.md) is gone. Batching and errors follow ``server.make_infer``, as on the PyTriton path.

The model's config says what to load in ``parameters`` (``source``: a model key, an absolute ONNX path or one
relative to the model folder; ``backend``; ``size``; ``max_batch_size``; optional ``sys_path``), written by
``python_repo.write_python_model``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

# Only importable inside the stub process (the Python backend puts it on sys.path); never imported elsewhere.
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]


class TritonPythonModel:
    """Triton's Python-backend interface: initialize once per instance, execute per (dynamic) batch of requests."""

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        # The launching interpreter's import path first, so this stub imports the same packages it would.
        extra = [p for p in params.get("sys_path", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:0] = extra
        # lazy: fusedops may be importable only through sys_path, set just above
        from fusedops.serve.backends import open_backend
        from fusedops.serve.server import make_infer

        source = params["source"]
        if source.lower().endswith(".onnx") and not Path(source).is_absolute():
            source = str(Path(args["model_repository"]) / source)
        self.served = open_backend(source, params["backend"], params.get("size", "small"))
        self.input_names = [t["name"] for t in config["input"]]
        self.infer = make_infer(self.served, int(params["max_batch_size"]))

    def execute(self, requests: list) -> list:
        feeds = []
        for request in requests:  # Triton checked names, datatypes and shapes against the config already
            feeds.append({n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.input_names})
        try:
            outputs = self.infer(feeds)
        except Exception as e:  # the model's own error: every request of the batch gets it, the server keeps serving
            error = pb_utils.TritonError(f"fusedops {self.served.backend}: {type(e).__name__}: {e}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, np.ascontiguousarray(value))
                                                           for name, value in out.items()])
                for out in outputs]
