"""ONNX Runtime timings: the unfused standard-op export vs the fused export with the fusedops library.

    ort_rows(entry, size="bench", ...) -> list[dict]   CUDA EP, IOBinding on device buffers; [] without the CUDA EP
    cpu_rows(entry, size="bench", batch=None, ...)     CPU EP (host arrays); the ratio recorded in docs/ort.md

Each row: {"model", "backend", "precision", "median_ms", "batch", "runs"}; backends "ort-cuda-unfused",
"ort-cuda-fused" (or the -cpu- pair). Timings are medians of perf_counter around synchronised runs after warm-up;
the unfused and fused sessions are timed alternately so drifting machine load hits both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

import numpy as np
import onnxruntime as ort

from .. import exporter_api
from .. import ort as fo
from ..errors import FusedopsError
from ..exporter.fuse import fuse_model
from ..models.registry import get_entry

CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"


def _entry(entry: Any):
    if isinstance(entry, str) or isinstance(entry, int):
        return get_entry(str(entry))
    return entry


_MODEL_CACHE: dict[tuple[str, str], tuple] = {}


def models(entry, size: str):
    """(unfused, fused) ModelProtos of a reference model, exported once per process (bench exports take seconds)."""
    entry = _entry(entry)
    key = (entry.key, size)
    if key not in _MODEL_CACHE:

        unfused = exporter_api.export_unfused_model(entry.key, size=size)
        fused = fuse_model(unfused)
        if not any(n.domain == "fusedops" for n in fused.graph.node):
            raise FusedopsError(f"{entry.key}: the fuser emitted no fusedops node")
        _MODEL_CACHE[key] = (unfused, fused)
    return _MODEL_CACHE[key]


_models = models


def _alternate(runners: dict[str, Callable[[], None]], warmup: int, iters: int) -> dict[str, list[float]]:
    for fn in runners.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(iters):
        for k, fn in runners.items():
            t0 = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return times


def ort_rows(entry: Any, size: str = "bench", batch: int | None = None, warmup: int = 5, iters: int = 20,
             precisions: tuple[str, ...] = ("tf32", "fp32"), device_id: int = 0) -> list[dict]:
    """CUDA EP: unfused vs fused (library) per precision; [] when onnxruntime has no CUDA EP."""

    if CUDA_EP not in ort.get_available_providers():
        return []
    entry = _entry(entry)
    unfused, fused = _models(entry, size)
    (x,) = entry.inputs(size, batch=batch)
    x_np = np.ascontiguousarray(x.numpy())
    rows = []
    for prec in precisions:
        tf32 = prec == "tf32"
        cuda_opts = {"device_id": str(device_id), "use_tf32": "1" if tf32 else "0"}
        providers = [CUDA_EP, CPU_EP]
        popts = [cuda_opts, {}]
        s_unf = ort.InferenceSession(unfused.SerializeToString(), providers=providers, provider_options=popts)
        s_fus = fo.session(fused, providers=providers, allow_tf32=tf32, provider_options=popts)
        runners = {}
        keep = []
        for name, sess in (("ort-cuda-unfused", s_unf), ("ort-cuda-fused", s_fus)):
            x_dev = ort.OrtValue.ortvalue_from_numpy(x_np, "cuda", device_id)
            io = sess.io_binding()
            io.bind_ortvalue_input(sess.get_inputs()[0].name, x_dev)
            io.bind_output(sess.get_outputs()[0].name, "cuda", device_id)
            keep.append(x_dev)

            def run(sess=sess, io=io):
                io.synchronize_inputs()
                sess.run_with_iobinding(io)
                io.synchronize_outputs()

            runners[name] = run
        before = fo.kernel_calls("cuda")
        times = _alternate(runners, warmup, iters)
        if fo.kernel_calls("cuda") == before:
            raise FusedopsError(f"{entry.key}: the fused session did not run the library's CUDA kernels")
        for name, ts in times.items():
            rows.append({"model": entry.key, "backend": name, "precision": prec, "batch": x_np.shape[0],
                         "median_ms": statistics.median(ts), "min_ms": min(ts), "max_ms": max(ts),
                         "runs": len(ts)})
        del runners, keep, s_unf, s_fus
    return rows


def cpu_rows(entry: Any, size: str = "bench", batch: int | None = None, warmup: int = 1, iters: int = 5,
             intra_op_threads: int = 0) -> list[dict]:
    """CPU EP: the unfused export on ORT's own kernels vs the fused export with the library's CPU kernels."""

    entry = _entry(entry)
    unfused, fused = _models(entry, size)
    (x,) = entry.inputs(size, batch=batch)
    feeds_name = None
    so_u = ort.SessionOptions()
    so_u.intra_op_num_threads = intra_op_threads
    s_unf = ort.InferenceSession(unfused.SerializeToString(), so_u, providers=[CPU_EP])
    so_f = ort.SessionOptions()
    so_f.intra_op_num_threads = intra_op_threads
    s_fus = fo.session(fused, providers=[CPU_EP], sess_options=so_f)
    feeds_name = s_unf.get_inputs()[0].name
    x_np = np.ascontiguousarray(x.numpy())
    y_unf = s_unf.run(None, {feeds_name: x_np})[0]
    y_fus = s_fus.run(None, {s_fus.get_inputs()[0].name: x_np})[0]
    max_diff = float(np.max(np.abs(y_unf - y_fus)))
    runners = {"ort-cpu-unfused": lambda: s_unf.run(None, {feeds_name: x_np}),
               "ort-cpu-fused": lambda: s_fus.run(None, {s_fus.get_inputs()[0].name: x_np})}
    times = _alternate(runners, warmup, iters)
    return [{"model": entry.key, "backend": k, "precision": "fp32", "batch": x_np.shape[0],
             "median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v), "runs": len(v),
             "max_abs_diff": max_diff}
            for k, v in times.items()]


def main(argv: list[str] | None = None) -> None:
    """python -m fusedops.benchmark.ort_rows [cpu|cuda] [model ...] [--size small|bench] [--batch N]"""
    p = argparse.ArgumentParser(prog="python -m fusedops.benchmark.ort_rows")
    p.add_argument("backend", choices=["cpu", "cuda"])
    p.add_argument("models", nargs="*", default=["1", "2", "3", "4"])
    p.add_argument("--size", default="bench", choices=["small", "bench"])
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--iters", type=int, default=None)
    a = p.parse_args(argv)
    for m in a.models:
        if a.backend == "cpu":
            rows = cpu_rows(m, a.size, batch=a.batch, **({"iters": a.iters} if a.iters else {}))
        else:
            rows = ort_rows(m, a.size, batch=a.batch, **({"iters": a.iters} if a.iters else {}))
        for r in rows:
            print(json.dumps(r), flush=True)
        by = {(r["backend"].rsplit("-", 1)[-1], r["precision"]): r["median_ms"] for r in rows}
        for prec in sorted({r["precision"] for r in rows}):
            if ("unfused", prec) in by and ("fused", prec) in by:
                print(f"# {m} {a.backend} {prec}: unfused/fused = {by[('unfused', prec)] / by[('fused', prec)]:.2f}x",
                      flush=True)


if __name__ == "__main__":
    main()
