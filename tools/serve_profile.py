"""Where a served request's time goes: bare client loops (no checking, inputs built once) against a running
`fusedops serve`, with Triton's own statistics for the same requests.

    python tools/serve_profile.py --http 127.0.0.1:8000 --grpc 127.0.0.1:8001 [--requests 2000] [--json OUT]

For each client (gRPC sync, gRPC asyncio, HTTP sync) and batch 1:
- a liveness round trip (``is_server_live``): the client + transport + a request Triton answers without a model;
- ``infer`` end to end, p50 / p90 / p99 / mean;
- the deltas of ``/v2/models/<m>/stats`` over the timed requests, per request: queue (dynamic batcher),
  compute_input, compute_infer (the backend: for the Python backend the stub round trip + the model), compute_output.
  ``end to end - server success`` is the client and the transport.
The statistics endpoint must be open: `fusedops serve` (tritonserver path) leaves it open; PyTriton restricts it
(then only the client-side numbers are printed). The model's input is random float32 of the served shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.error
import urllib.request

import numpy as np

WARMUP = 100


def _stats(http: str, model: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://{http}/v2/models/{model}/stats", timeout=10) as r:
            return json.load(r)["model_stats"][0]
    except (urllib.error.URLError, OSError, KeyError, IndexError):
        return None


def _delta(before: dict | None, after: dict | None) -> dict:
    """Per-request milliseconds of each phase between two statistics snapshots, and the mean batch Triton ran."""
    if not before or not after:
        return {"server_stats": "unavailable (statistics endpoint restricted or unreachable)"}
    out = {}
    for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        a, b = before["inference_stats"][phase], after["inference_stats"][phase]
        count = int(b["count"]) - int(a["count"])
        out[f"server_{phase}_ms"] = (int(b["ns"]) - int(a["ns"])) / max(count, 1) / 1e6
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    out["mean_batch"] = inferences / max(executions, 1)
    return out


def _summary(ms: list[float]) -> dict:
    return {"p50_ms": statistics.median(ms), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)), "mean_ms": statistics.fmean(ms)}


def _input_shape(http: str, model: str) -> tuple[str, list[int]]:
    with urllib.request.urlopen(f"http://{http}/v2/models/{model}", timeout=10) as r:
        meta = json.load(r)
    (inp,) = meta["inputs"]
    return inp["name"], [1 if d == -1 else d for d in inp["shape"]]


def _sync_loop(mod, url: str, model: str, name: str, x: np.ndarray, n: int, http: str) -> dict:
    client = mod.InferenceServerClient(url)
    inp = mod.InferInput(name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    live = []
    for _ in range(WARMUP):
        client.infer(model, [inp])
    for _ in range(n):
        t0 = time.perf_counter()
        client.is_server_live()
        live.append((time.perf_counter() - t0) * 1e3)
    before = _stats(http, model)
    ms = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.infer(model, [inp]).as_numpy("output")
        ms.append((time.perf_counter() - t0) * 1e3)
    after = _stats(http, model)
    client.close()
    return {"live_p50_ms": statistics.median(live), **_summary(ms), **_delta(before, after)}


def _grpc_aio_loop(url: str, model: str, name: str, x: np.ndarray, n: int, http: str) -> dict:
    import tritonclient.grpc.aio as aio  # lazy: only this client's module

    async def run():
        client = aio.InferenceServerClient(url)
        inp = aio.InferInput(name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        for _ in range(WARMUP):
            await client.infer(model, [inp])
        before = _stats(http, model)
        ms = []
        for _ in range(n):
            t0 = time.perf_counter()
            (await client.infer(model, [inp])).as_numpy("output")
            ms.append((time.perf_counter() - t0) * 1e3)
        after = _stats(http, model)
        await client.close()
        return {**_summary(ms), **_delta(before, after)}

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--http", required=True, help="host:port of the HTTP endpoint (metadata, statistics)")
    p.add_argument("--grpc", required=True, help="host:port of the gRPC endpoint")
    p.add_argument("--model", default="fusedops")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args(argv)
    import tritonclient.grpc as grpc_sync  # lazy: the serve extra; imported after argument checks
    import tritonclient.http as http_sync

    name, shape = _input_shape(a.http, a.model)
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    results = {
        "grpc_sync": _sync_loop(grpc_sync, a.grpc, a.model, name, x, a.requests, a.http),
        "grpc_asyncio": _grpc_aio_loop(a.grpc, a.model, name, x, a.requests, a.http),
        "http_sync": _sync_loop(http_sync, a.http, a.model, name, x, a.requests, a.http),
    }
    for client, r in results.items():
        print(client + ": " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"input_shape": shape, "requests": a.requests, **results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
