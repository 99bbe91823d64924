"""``fusedops repo``: a Triton model repository (onnxruntime or tensorrt_plan) for an existing tritonserver."""

from __future__ import annotations

from ..serve.native_repo import write_native_repository
from ..serve.python_repo import write_python_repository
from ..serve.repository import RepoOptions, write_repository

NAME = "repo"
DEFAULT_MAX_QUEUE_DELAY_US = 0  # fusedops.serve.repository's (copied: no heavy import for --help)
HELP = "write a Triton model repository (onnxruntime, tensorrt_plan, python or fusedops' native) for tritonserver"


def add_arguments(p) -> None:
    p.add_argument("source", help="fused .onnx file (onnxruntime backend) or TensorRT engine .plan (tensorrt_plan)")
    p.add_argument("--out-dir", "--out", dest="out", required=True,
                   help="model repository folder (created; an existing model is kept unless --force; --out is the "
                        "earlier spelling)")
    p.add_argument("--model-name", default="fusedops", help="the model's name in the repository")
    p.add_argument("--backend", choices=["auto", "python", "native"], default="auto",
                   help="Triton backend: auto = onnxruntime for an .onnx, tensorrt for an engine; python = the "
                        "fused ONNX run by fusedops in the Python backend's stub (what `fusedops serve` runs; the "
                        "server's Python needs fusedops); native = fusedops' C++ backend, its libraries carried in "
                        "the model folder")
    p.add_argument("--runtime", choices=["auto", "ort-cpu", "ort-cuda"], default="auto",
                   help="with --backend python or native: what runs the model (auto: ort-cuda when "
                        "libfusedops_ort.so has CUDA)")
    p.add_argument("--onnx", default=None,
                   help="for an engine: the fused ONNX it was built from (tensor names, types and shapes)")
    p.add_argument("--max-batch-size", type=int, default=64, help="max_batch_size of the config")
    p.add_argument("--max-queue-delay-us", type=int, default=DEFAULT_MAX_QUEUE_DELAY_US,
                   help="dynamic batcher delay (microseconds; default 0)")
    p.add_argument("--instances", type=int, default=None,
                   help="model instances (instance_group count; default 2 for --backend native on ort-cuda, else 1)")
    p.add_argument("--kind", choices=["auto", "gpu", "cpu"], default="auto",
                   help="instance kind (auto: KIND_GPU for engines, KIND_CPU for ONNX unless the ORT library "
                        "was built with CUDA)")
    p.add_argument("--server-path", default=None,
                   help="where tritonserver will see the repository folder (e.g. /models in a container); "
                        "default: the folder's absolute path here. Library paths in the configs use it")
    p.add_argument("--force", action="store_true", help="replace an existing model of the same name")


def run(a) -> int:
    options = RepoOptions(source=a.source, out=a.out, model_name=a.model_name, onnx=a.onnx,
                          max_batch_size=a.max_batch_size, max_queue_delay_us=a.max_queue_delay_us,
                          instances=1 if a.instances is None and a.backend != "native" else a.instances,
                          kind=a.kind, server_path=a.server_path, force=a.force)
    if a.backend == "python":
        result = write_python_repository(options, a.runtime)
    elif a.backend == "native":
        result = write_native_repository(options, a.runtime)
    else:
        result = write_repository(options)
    print(f"wrote {result.config_path}")
    for note in result.notes:
        print(f"note: {note}")
    print("serve it with:")
    print(f"  {result.command}")
    return 0
