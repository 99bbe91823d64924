"""``fusedops serve``: a fused model on Triton (the tritonserver PyTriton's wheel carries), KServe v2 over HTTP and
gRPC."""

from __future__ import annotations

from ..serve.backends import BACKENDS
from ..serve.server import SERVERS, ServeOptions, resolve_server, serve
from ..serve.tritonserver import serve_tritonserver

NAME = "serve"
DEFAULT_MAX_QUEUE_DELAY_US = 0  # fusedops.serve.repository's (copied: no heavy import for --help)
HELP = "serve a fused model on Triton (tritonserver from PyTriton's wheel), KServe v2 over HTTP and gRPC"


def add_arguments(p) -> None:
    p.add_argument("source", help="fused .onnx file, TensorRT engine (.plan / .engine) or reference model key (1-4)")
    p.add_argument("--backend", choices=["auto", *BACKENDS], default="auto",
                   help="auto: TensorRT engine > ORT CUDA EP > PyTorch CUDA ops > ORT CPU, the first that can serve "
                        "the source here; torch-eager serves the unfused reference Model (a baseline)")
    p.add_argument("--server", choices=SERVERS, default="auto",
                   help="tritonserver: PyTriton's bundled tritonserver runs the model in its Python-backend stub; "
                        "native: the same tritonserver with fusedops' C++ backend (ONNX Runtime in its process, no "
                        "stub; ort-cpu / ort-cuda); pytriton: PyTriton's proxy to this process (≈ 3 ms more a "
                        "request, docs/serving.md); auto (default): native for a fused .onnx on ONNX Runtime "
                        "where its library is built, pytriton for a TensorRT engine, else tritonserver")
    p.add_argument("--size", choices=["small", "bench"], default="small", help="size of a reference model key")
    p.add_argument("--model-name", default="fusedops", help="the name clients address (default fusedops)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only)")
    p.add_argument("--http-port", type=int, default=8000, help="KServe v2 HTTP port (default 8000)")
    p.add_argument("--grpc-port", type=int, default=8001, help="KServe v2 gRPC port (default 8001)")
    p.add_argument("--metrics-port", type=int, default=8002, help="Prometheus metrics; 0 turns the endpoint off")
    p.add_argument("--max-batch-size", type=int, default=64,
                   help="largest batch Triton forms (and accepts in one request)")
    p.add_argument("--max-queue-delay-us", type=int, default=DEFAULT_MAX_QUEUE_DELAY_US,
                   help="how long the dynamic batcher waits to fill a batch (microseconds; default 0: Triton "
                        "batches what queues while the model runs)")
    p.add_argument("--instances", type=int, default=None,
                   help="model instances that Triton hands batches to: stub processes (--server tritonserver) or "
                        "sessions in the server (--server native); default 2 for native sessions on the CUDA EP, "
                        "else 1")
    p.add_argument("--exit-timeout", type=int, default=10,
                   help="seconds to finish in-flight requests after SIGINT / SIGTERM")
    p.add_argument("--log-verbose", type=int, default=0, help="tritonserver --log-verbose level")
    p.add_argument("--triton-log", default=None, help="file for tritonserver's log (default: a new temporary file, "
                                                      "named in the ready line)")


def run(a) -> int:
    options = ServeOptions(source=a.source, backend=a.backend, size=a.size, model_name=a.model_name, host=a.host,
                           http_port=a.http_port, grpc_port=a.grpc_port, metrics_port=a.metrics_port or None,
                           max_batch_size=a.max_batch_size, max_queue_delay_us=a.max_queue_delay_us,
                           exit_timeout_s=a.exit_timeout, log_verbose=a.log_verbose, triton_log=a.triton_log,
                           server=a.server, instances=a.instances)
    return (serve_tritonserver if resolve_server(options) in ("tritonserver", "native") else serve)(options)
