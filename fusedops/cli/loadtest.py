"""``fusedops loadtest``: a loopback load test of a served model, every response checked (JSON + PNG)."""

from __future__ import annotations

from ..serve.report import print_summary, write_report
from .common import add_precision_flags

NAME = "loadtest"
HELP = "load-test a served model on loopback, every response checked (JSON + PNG)"


def add_arguments(p) -> None:
    p.add_argument("url", help="the server, host:port of its gRPC (default) or HTTP endpoint; loopback only")
    p.add_argument("--reference", required=True,
                   help="what every response is checked against: a reference model key (1-4, eager PyTorch in "
                        "float64) or an .onnx file (its standard-ONNX function bodies on ORT CPU, no fusedops library)")
    p.add_argument("--size", choices=["small", "bench"], default="small", help="size of a reference model key")
    p.add_argument("--model-name", default="fusedops", help="the served model's name")
    p.add_argument("--protocol", choices=["grpc", "http"], default="grpc", help="client protocol (default grpc)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64],
                   help="requests in flight, one point each (default 1 8 64)")
    p.add_argument("--batch", type=int, nargs="+", default=[1], help="rows per request")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per (concurrency, batch) point")
    p.add_argument("--max-requests", type=int, default=1_000_000, help="cap on requests per point")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds one request may take before it counts as lost")
    p.add_argument("--processes", type=int, default=1,
                   help="client processes a point's requests are spread over (one Python process sends a few "
                        "thousand requests/s at most; use several to load a fast server at high concurrency)")
    add_precision_flags(p, ("tf32", "fp32"), default="tf32", dest="tolerance", old="--tolerance")
    p.add_argument("--out-dir", "--out", dest="out", default=None,
                   help="folder for loadtest.json and loadtest.png (--out is the earlier spelling)")


def run(a) -> int:
    from ..serve.loadtest import LoadOptions, run_loadtest  # lazy: asyncio: --help stays fast

    options = LoadOptions(url=a.url, reference=a.reference, size=a.size, model_name=a.model_name, protocol=a.protocol,
                          concurrency=a.concurrency, batch=a.batch, duration_s=a.duration, max_requests=a.max_requests,
                          timeout_s=a.timeout, tolerance=a.tolerance, processes=a.processes)
    result = run_loadtest(options)
    print_summary(result)
    if a.out:
        for path in write_report(result, a.out):
            print(f"wrote {path}")
    return 0 if result["ok"] else 1
