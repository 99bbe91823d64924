"""`fusedops loadtest`: a bounded asynchronous KServe v2 client (tritonclient, gRPC or HTTP) that sweeps concurrency
and batch size against a served model and checks every response against a local reference.

Why not Triton's perf_analyzer: its PyPI wheel (perf-analyzer 2.60) is built for glibc 2.38 and does not install on
this project's machines (glibc 2.36), and it does not check response values; this client does, for every response.

Bounds: only loopback addresses are accepted; each (concurrency, batch) point runs for at most ``duration_s`` seconds
and ``max_requests`` requests, every request has a ``timeout_s`` deadline (past it the request counts as lost), and
the workers stop by themselves.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import sys
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from fusedops.errors import FusedopsError

from .backends import onnx_specs
from .server import is_loopback

TOLERANCES = {"fp32": (1e-4, 1e-4), "tf32": (1e-2, 1e-2)}  # (atol, rtol), the project's verify tolerances
_NP_TO_V2 = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16", np.dtype(np.float64): "FP64",
             np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64"}
MAX_DURATION_S = 600.0


@dataclass
class LoadOptions:
    url: str  # host:port (gRPC or HTTP endpoint per `protocol`)
    reference: str  # model key (eager PyTorch, float64) or .onnx (its standard-op function bodies on ORT CPU)
    size: str = "small"
    model_name: str = "fusedops"
    protocol: str = "grpc"
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 64])
    batch: list[int] = field(default_factory=lambda: [1])
    duration_s: float = 10.0
    max_requests: int = 1_000_000
    timeout_s: float = 30.0
    tolerance: str = "tf32"
    pool: int = 16  # distinct inputs per batch size, each with its reference output
    warmup_requests: int = 2  # per worker, checked but not timed
    # Client processes a point's workers are spread over. One Python process (one event loop, the GIL) sends a few
    # thousand requests/s at most (measured: ≈ 1 core per 2000 req/s on the 2-core machine), which would cap the
    # throughput measured at high concurrency instead of the server.
    processes: int = 1


def check_url(url: str) -> tuple[str, int]:
    """(host, port) of a loopback ``host:port``; FusedopsError for anything else (this tool sends traffic to the
    machine it runs on only)."""
    text = url.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit():
        raise FusedopsError(f"URL {url!r} must be host:port (e.g. 127.0.0.1:8001)")
    if not is_loopback(host):
        raise FusedopsError(f"URL {url!r} is not a loopback address; loadtest only sends traffic to this machine "
                            f"(127.0.0.0/8, ::1, localhost)")
    return host, int(port)


def check_options(o: LoadOptions) -> None:
    check_url(o.url)
    if o.protocol not in ("grpc", "http"):
        raise FusedopsError(f"protocol must be grpc or http, got {o.protocol!r}")
    if o.tolerance not in TOLERANCES:
        raise FusedopsError(f"tolerance must be one of {sorted(TOLERANCES)}, got {o.tolerance!r}")
    if not o.concurrency or min(o.concurrency) < 1 or max(o.concurrency) > 1024:
        raise FusedopsError(f"concurrency levels must be 1..1024, got {o.concurrency}")
    if not o.batch or min(o.batch) < 1:
        raise FusedopsError(f"batch sizes must be >= 1, got {o.batch}")
    if not 0 < o.duration_s <= MAX_DURATION_S:
        raise FusedopsError(f"duration must be in (0, {MAX_DURATION_S:.0f}] seconds, got {o.duration_s}")
    if o.max_requests < 1 or o.timeout_s <= 0 or o.pool < 1 or not 1 <= o.processes <= 64:
        raise FusedopsError("max-requests, timeout and pool must be positive, processes 1..64")


# ---- the local reference ------------------------------------------------------------------------------------------

class Reference:
    """Inputs and their expected outputs for one served model: eager PyTorch in float64 for a model key, or the
    ONNX model's standard-op function bodies on ORT CPU (no fusedops library) for an .onnx file."""

    def __init__(self, reference: str, size: str = "small"):
        self.reference, self.size = reference, size
        if reference.lower().endswith(".onnx"):
            if not Path(reference).is_file():
                raise FusedopsError(f"reference ONNX model {reference!r} not found")
            import onnxruntime as ort  # lazy: only the reference kind chosen loads its runtime

            self.kind = "onnx"
            self._sess = ort.InferenceSession(reference, providers=["CPUExecutionProvider"])
            ins, outs = onnx_specs(reference)
            if len(ins) != 1:
                raise FusedopsError(f"reference {reference!r} has {len(ins)} inputs; loadtest feeds one")
            self.input_name, self.output_names = ins[0].name, [o.name for o in outs]
            self._row_shape = tuple(ins[0].shape[1:])
            if any(d < 0 for d in self._row_shape):
                raise FusedopsError(f"reference {reference!r}: only the first input dim may be dynamic")
        else:
            import torch  # lazy: only the reference kind chosen loads its runtime

            from fusedops.models.registry import get_entry

            self._entry = get_entry(reference)
            self.kind = "torch"
            self._device = "cuda" if torch.cuda.is_available() else "cpu"
            self._model = self._entry.build(size).double().to(self._device).eval()
            self.input_name, self.output_names = "input", ["output"]
            self._row_shape = tuple(self._entry.sizes(size).input_shape[1:])

    def cases(self, batch: int, count: int) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """``count`` fresh uniform [0, 1) float32 inputs of ``batch`` rows with their float64 expected outputs
        (seeded from the batch, so a rerun sends the same data)."""
        rng = np.random.default_rng(zlib.crc32(f"{self.reference}:{self.size}:{batch}".encode()))
        out = []
        for _ in range(count):
            x = rng.random((batch, *self._row_shape), dtype=np.float32)
            if self.kind == "onnx":
                ys = self._sess.run(self.output_names, {self.input_name: x})
                expected = {n: np.asarray(y, dtype=np.float64) for n, y in zip(self.output_names, ys)}
            else:
                import torch  # lazy: only for a PyTorch reference (imported above)

                with torch.no_grad():
                    y = self._model(torch.from_numpy(x).to(self._device, torch.float64))
                expected = {"output": y.cpu().numpy()}
            out.append((x, expected))
        return out


def compare(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], atol: float, rtol: float) -> str | None:
    """None when every output matches within tolerance, else what differs (shape, non-finite, max error)."""
    for name, ref in expected.items():
        y = got.get(name)
        if y is None:
            return f"output {name!r} missing"
        if y.shape != ref.shape:
            return f"output {name!r} has shape {y.shape}, expected {ref.shape}"
        y64 = y.astype(np.float64)
        bad = ~(np.abs(y64 - ref) <= atol + rtol * np.abs(ref))  # NaN compares False: counted as bad
        if bad.any():
            return f"output {name!r}: {int(bad.sum())} elements off (max |err| {float(np.nanmax(np.abs(y64 - ref))):.3g})"
    return None


# ---- the client ---------------------------------------------------------------------------------------------------

class _Client:
    """One async tritonclient of either protocol, with the calls the load test needs."""

    def __init__(self, protocol: str, url: str, connections: int):
        self.protocol = protocol
        if protocol == "grpc":
            import tritonclient.grpc.aio as client_mod  # lazy: optional (serve extra), one protocol's client
            self._client = client_mod.InferenceServerClient(url)
        else:
            import tritonclient.http.aio as client_mod  # lazy: optional (serve extra), one protocol's client
            self._client = client_mod.InferenceServerClient(url, conn_limit=max(connections, 1))
        self._mod = client_mod

    async def metadata(self, model: str) -> dict:
        md = await self._client.get_model_metadata(model, as_json=True) if self.protocol == "grpc" else \
            await self._client.get_model_metadata(model)
        return md

    def make_inputs(self, name: str, x: np.ndarray):
        inp = self._mod.InferInput(name, list(x.shape), _NP_TO_V2[x.dtype])
        inp.set_data_from_numpy(x)
        return [inp]

    async def infer(self, model: str, inputs, outputs: list[str], timeout_s: float) -> dict[str, np.ndarray]:
        if self.protocol == "grpc":
            result = await self._client.infer(model, inputs, client_timeout=timeout_s)
        else:
            result = await asyncio.wait_for(self._client.infer(model, inputs), timeout_s)
        return {n: result.as_numpy(n) for n in outputs}

    async def close(self):
        await self._client.close()


@dataclass
class _Tally:
    latencies_ms: list[float] = field(default_factory=list)
    ok: int = 0
    wrong: int = 0
    errors: int = 0
    lost: int = 0
    first_problems: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.first_problems) < 5:
            self.first_problems.append(text)


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


async def _drive(o: LoadOptions, client: _Client, cases, outputs: list[str], input_name: str, concurrency: int,
                 max_requests: int, start_barrier=None) -> tuple[_Tally, float, int]:
    """``concurrency`` workers, each sending back-to-back requests: a checked warm-up, then ``o.duration_s`` timed
    (after ``start_barrier``, when processes share a point). Returns the tally, the timed seconds and the count sent."""
    atol, rtol = TOLERANCES[o.tolerance]
    requests = [(client.make_inputs(input_name, x), expected) for x, expected in cases]
    tally = _Tally()
    sent = 0

    async def one(k: int, timed: bool) -> None:
        inputs, expected = requests[k % len(requests)]
        t0 = time.perf_counter()
        try:
            got = await client.infer(o.model_name, inputs, outputs, o.timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            tally.lost += 1
            tally.note(f"no response within {o.timeout_s} s")
            return
        except Exception as e:  # the server's error response (InferenceServerException) or a broken connection
            text = str(e)
            if "Deadline" in text or "timed out" in text.lower():
                tally.lost += 1
            else:
                tally.errors += 1
            tally.note(text[:300])
            return
        ms = (time.perf_counter() - t0) * 1e3
        problem = compare(got, expected, atol, rtol)
        if problem:
            tally.wrong += 1
            tally.note(problem)
        else:
            tally.ok += 1
            if timed:  # latency and throughput count correct answers only
                tally.latencies_ms.append(ms)

    async def warm(w: int) -> None:
        for i in range(o.warmup_requests):
            await one(w + i * concurrency, timed=False)

    async def worker(w: int, deadline: float) -> None:
        nonlocal sent
        while time.perf_counter() < deadline and sent < max_requests:
            sent += 1
            await one(sent * 7 + w, timed=True)

    await asyncio.gather(*(warm(w) for w in range(concurrency)))  # connections up, server warm; checked, not timed
    if start_barrier is not None:
        start_barrier.wait(timeout=o.timeout_s + 60)  # every process warm: the timed part starts together
    start = time.perf_counter()
    await asyncio.gather(*(worker(w, start + o.duration_s) for w in range(concurrency)))
    return tally, time.perf_counter() - start, sent


async def _point(o: LoadOptions, client: _Client, cases, outputs: list[str], input_name: str, concurrency: int,
                 batch: int) -> dict:
    if o.processes > 1 and concurrency > 1:
        tally, elapsed, sent = _point_in_processes(o, cases, outputs, input_name, concurrency)
    else:
        tally, elapsed, sent = await _drive(o, client, cases, outputs, input_name, concurrency, o.max_requests)
    return _summarise(tally, elapsed, sent, concurrency, batch)


def _summarise(tally: _Tally, elapsed: float, sent: int, concurrency: int, batch: int) -> dict:
    answered = len(tally.latencies_ms)
    return {
        "concurrency": concurrency, "batch": batch, "duration_s": round(elapsed, 3),
        "requests": tally.ok + tally.wrong + tally.errors + tally.lost,  # warm-up included: every one is checked
        "timed_requests": sent, "ok": tally.ok, "wrong": tally.wrong, "errors": tally.errors, "lost": tally.lost,
        "p50_ms": _percentile(tally.latencies_ms, 50), "p90_ms": _percentile(tally.latencies_ms, 90),
        "p99_ms": _percentile(tally.latencies_ms, 99),
        "mean_ms": float(np.mean(tally.latencies_ms)) if answered else None,
        "throughput_req_s": answered / elapsed if elapsed > 0 else None,
        "throughput_inf_s": answered * batch / elapsed if elapsed > 0 else None,
        "first_problems": tally.first_problems,
    }


def _client_process(o: LoadOptions, cases, outputs, input_name, concurrency, max_requests, barrier, results):
    """One client process of a point (spawned): its own client and event loop; puts (tally, seconds, sent) or
    the error on ``results``, and breaks the barrier on an error so the others stop waiting."""
    async def main():
        client = _Client(o.protocol, o.url.split("://", 1)[-1], concurrency)
        try:
            return await _drive(o, client, cases, outputs, input_name, concurrency, max_requests, barrier)
        finally:
            await client.close()

    try:
        tally, elapsed, sent = asyncio.run(main())
        results.put(("ok", tally.__dict__, elapsed, sent))
    except BaseException as e:  # reported by the parent as one line; the barrier must not hold the others
        barrier.abort()
        results.put(("error", f"{type(e).__name__}: {str(e)[:300]}"))


def _point_in_processes(o: LoadOptions, cases, outputs, input_name, concurrency) -> tuple[_Tally, float, int]:
    """The point's workers spread over min(processes, concurrency) spawned processes that start their timed part
    together; their tallies merged (throughput: all answers over the longest timed part)."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding gRPC threads
    n = min(o.processes, concurrency)
    shares = [concurrency // n + (i < concurrency % n) for i in range(n)]
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_client_process, daemon=True,
                         args=(o, cases, outputs, input_name, c, max(1, o.max_requests * c // concurrency), barrier,
                               results)) for c in shares]
    for p in procs:
        p.start()
    merged, elapsed, sent, errors = _Tally(), 0.0, 0, []
    try:
        for _ in procs:
            item = results.get(timeout=o.duration_s + 2 * o.timeout_s + 120)
            if item[0] == "error":
                errors.append(item[1])
                continue
            part = _Tally(**item[1])
            merged.latencies_ms += part.latencies_ms
            for k in ("ok", "wrong", "errors", "lost"):
                setattr(merged, k, getattr(merged, k) + getattr(part, k))
            merged.first_problems = (merged.first_problems + part.first_problems)[:5]
            elapsed, sent = max(elapsed, item[2]), sent + item[3]
    except queue.Empty:
        errors.append("a client process sent no result in time")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if errors:
        raise FusedopsError(f"load test client process failed: {errors[0]}")
    return merged, elapsed, sent


def _log_point(p: dict) -> None:
    """One stderr line per finished point, so a run cut off by an outer time limit still shows what it measured."""
    def ms(key: str) -> str:
        v = p.get(key)
        return "-" if v is None else f"{v:.3f}"
    print(f"loadtest: batch {p.get('batch')} concurrency {p.get('concurrency')}: p50 {ms('p50_ms')} p99 {ms('p99_ms')} "
          f"ms, {p.get('ok')} ok, {p.get('wrong')} wrong, {p.get('errors')} errors, {p.get('lost')} lost",
          file=sys.stderr, flush=True)


async def _run(o: LoadOptions, reference: Reference) -> dict:
    client = _Client(o.protocol, o.url.split("://", 1)[-1], max(o.concurrency))
    try:
        try:
            md = await asyncio.wait_for(client.metadata(o.model_name), o.timeout_s)
        except Exception as e:
            raise FusedopsError(f"cannot read model {o.model_name!r} from {o.url} over {o.protocol} "
                                f"({type(e).__name__}: {str(e)[:200]})") from None
        served_inputs = [i["name"] for i in md.get("inputs", [])]
        served_outputs = [x["name"] for x in md.get("outputs", [])]
        if served_inputs != [reference.input_name] or sorted(served_outputs) != sorted(reference.output_names):
            raise FusedopsError(f"the served model takes {served_inputs} -> {served_outputs}, the reference "
                                f"{reference.reference!r} [{reference.input_name}] -> {reference.output_names}")
        points = []
        for batch in o.batch:
            cases = reference.cases(batch, o.pool)
            for c in o.concurrency:
                points.append(await _point(o, client, cases, served_outputs, reference.input_name, c, batch))
                _log_point(points[-1])
        return {"model_metadata": md, "points": points}
    finally:
        await client.close()


def run_loadtest(o: LoadOptions) -> dict:
    """Run the sweep; returns the report (``ok``: no wrong, failed or lost response at any point)."""
    check_options(o)
    reference = Reference(o.reference, o.size)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    body = asyncio.run(_run(o, reference))
    points = body["points"]
    return {
        "url": o.url, "protocol": o.protocol, "model": o.model_name, "reference": o.reference,
        "reference_kind": reference.kind, "size": o.size, "tolerance": o.tolerance, "started_utc": started,
        "duration_s_per_point": o.duration_s, "timeout_s": o.timeout_s, **body,
        "ok": all(p["wrong"] == 0 and p["errors"] == 0 and p["lost"] == 0 and p["ok"] > 0 for p in points),
    }
