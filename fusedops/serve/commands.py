"""Arguments and entry points of `fusedops serve`, `fusedops repo` and `fusedops loadtest` (cli.py only wires them)."""

from __future__ import annotations

import argparse

from .backends import BACKENDS


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="fused .onnx file, TensorRT engine (.plan / .engine) or reference model key (1-4)")
    p.add_argument("--backend", choices=["auto", *BACKENDS], default="auto",
                   help="auto: TensorRT engine > ORT CUDA EP > PyTorch CUDA ops > ORT CPU, the first that can serve "
                        "the source here; torch-eager serves the unfused reference Model (a baseline)")
    p.add_argument("--size", choices=["small", "bench"], default="small", help="size of a reference model key")
    p.add_argument("--model-name", default="fusedops", help="the name clients address (default fusedops)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only)")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002, help="Prometheus metrics; 0 turns the endpoint off")
    p.add_argument("--max-batch-size", type=int, default=64,
                   help="largest batch Triton forms (and accepts in one request)")
    p.add_argument("--max-queue-delay-us", type=int, default=100,
                   help="how long the dynamic batcher waits to fill a batch (microseconds)")
    p.add_argument("--exit-timeout", type=int, default=10,
                   help="seconds to finish in-flight requests after SIGINT / SIGTERM")
    p.add_argument("--log-verbose", type=int, default=0, help="tritonserver --log-verbose level")
    p.add_argument("--triton-log", default=None, help="file for tritonserver's log (default: a new temporary file, "
                                                      "named in the ready line)")


def run_serve(a) -> int:
    from .server import ServeOptions, serve

    return serve(ServeOptions(source=a.source, backend=a.backend, size=a.size, model_name=a.model_name, host=a.host,
                              http_port=a.http_port, grpc_port=a.grpc_port,
                              metrics_port=a.metrics_port or None, max_batch_size=a.max_batch_size,
                              max_queue_delay_us=a.max_queue_delay_us, exit_timeout_s=a.exit_timeout,
                              log_verbose=a.log_verbose, triton_log=a.triton_log))


def add_repo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="fused .onnx file (onnxruntime backend) or TensorRT engine .plan (tensorrt_plan)")
    p.add_argument("--out", required=True, help="model repository folder (created; an existing model is kept "
                                                "unless --force)")
    p.add_argument("--model-name", default="fusedops")
    p.add_argument("--onnx", default=None,
                   help="for an engine: the fused ONNX it was built from (tensor names, types and shapes)")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--max-queue-delay-us", type=int, default=100)
    p.add_argument("--instances", type=int, default=1, help="model instances (instance_group count)")
    p.add_argument("--kind", choices=["auto", "gpu", "cpu"], default="auto",
                   help="instance kind (auto: KIND_GPU for engines, KIND_CPU for ONNX unless the ORT library "
                        "was built with CUDA)")
    p.add_argument("--server-path", default=None,
                   help="where tritonserver will see the repository folder (e.g. /models in a container); "
                        "default: the folder's absolute path here. Library paths in the configs use it")
    p.add_argument("--force", action="store_true", help="replace an existing model of the same name")


def run_repo(a) -> int:
    from .repository import RepoOptions, write_repository

    result = write_repository(RepoOptions(source=a.source, out=a.out, model_name=a.model_name, onnx=a.onnx,
                                          max_batch_size=a.max_batch_size, max_queue_delay_us=a.max_queue_delay_us,
                                          instances=a.instances, kind=a.kind, server_path=a.server_path,
                                          force=a.force))
    print(f"wrote {result.config_path}")
    for note in result.notes:
        print(f"note: {note}")
    print("serve it with:")
    print(f"  {result.command}")
    return 0


def add_loadtest_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="the server, host:port of its gRPC (default) or HTTP endpoint; loopback only")
    p.add_argument("--reference", required=True,
                   help="what every response is checked against: a reference model key (1-4, eager PyTorch in "
                        "float64) or an .onnx file (its standard-ONNX function bodies on ORT CPU, no fusedops library)")
    p.add_argument("--size", choices=["small", "bench"], default="small", help="size of a reference model key")
    p.add_argument("--model-name", default="fusedops")
    p.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--batch", type=int, nargs="+", default=[1], help="rows per request")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per (concurrency, batch) point")
    p.add_argument("--max-requests", type=int, default=1_000_000, help="cap on requests per point")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds one request may take before it counts as lost")
    p.add_argument("--tolerance", choices=["fp32", "tf32"], default="tf32",
                   help="fp32: |err| <= 1e-4 + 1e-4|ref|; tf32 (GPU default precision): 1e-2 + 1e-2|ref|")
    p.add_argument("--out", default=None, help="folder for loadtest.json and loadtest.png")


def run_loadtest(a) -> int:
    from .loadtest import LoadOptions, run_loadtest as run
    from .report import print_summary, write_report

    result = run(LoadOptions(url=a.url, reference=a.reference, size=a.size, model_name=a.model_name,
                             protocol=a.protocol, concurrency=a.concurrency, batch=a.batch, duration_s=a.duration,
                             max_requests=a.max_requests, timeout_s=a.timeout, tolerance=a.tolerance))
    print_summary(result)
    if a.out:
        for path in write_report(result, a.out):
            print(f"wrote {path}")
    return 0 if result["ok"] else 1
