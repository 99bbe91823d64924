"""TensorRT timings for the bench: one engine per precision from the fused export, executions timed on the GPU.

    trt_rows(entry, size="bench", repeats=20, warmup=5) -> list[dict]   [] when TensorRT cannot run here
    unavailable_reason() -> str | None                                   why not (None when it can)

Rows have the keys of ``ort_rows.ort_rows``: {"model", "backend": "trt", "precision", "batch", "median_ms",
"min_ms", "max_ms", "runs"}. Engines come from ``trt_build`` through its engine cache (built once per model, size,
precision, GPU and plugin library). Only ``execute_async_v3`` is timed, with CUDA events on the engine's stream;
inputs are bound beforehand and rotated between runs (outside the timed region) so no run reads a warm L2 copy of
the previous run's input.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

import onnx
import torch
from onnx import helper

from ..catalog import DOMAIN
from ..errors import FusedopsError
from ..trt_build import builder, runtime
from ..workflows import verify
from ..workflows.verify import engine_cache_dir, trt_execute_times_ms
from .ort_rows import _entry, models

PRECISIONS = ("tf32", "fp32")
ROTATION_BUDGET_BYTES = 1 << 30  # device memory the rotating input copies may take together


def unavailable_reason() -> str | None:
    """None when TensorRT, pycuda, a CUDA device and the plugin library are all here; else the first reason."""
    return verify._trt_available()  # through the module: tests replace it


def rotation_count(input_bytes: int, budget_bytes: int = ROTATION_BUDGET_BYTES, most: int = 4) -> int:
    """How many input copies to rotate through: up to ``most`` within ``budget_bytes``, at least 1."""
    if input_bytes <= 0:
        return most
    return max(1, min(most, budget_bytes // input_bytes))


def with_allow_tf32(model, value: int):
    """A copy of a fused ModelProto with every fusedops GEMM node's allow_tf32 set to ``value`` (the plugin follows
    its field, not TensorRT's TF32 flag, so a strict fp32 engine needs 0 here)."""

    out = type(model)()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.domain != DOMAIN or node.op_type != "GemmGroupNormAct":
            continue
        kept = [a for a in node.attribute if a.name != "allow_tf32"]
        del node.attribute[:]
        node.attribute.extend(kept)
        node.attribute.append(helper.make_attribute("allow_tf32", int(value)))
    return out


def summarise(model: str, precision: str, batch: int, times_ms: list[float]) -> dict:
    if not times_ms:
        raise FusedopsError(f"{model} {precision}: no TensorRT timings")
    return {"model": model, "backend": "trt", "precision": precision, "batch": int(batch),
            "median_ms": statistics.median(times_ms), "min_ms": min(times_ms), "max_ms": max(times_ms),
            "runs": len(times_ms)}


def trt_rows(entry: Any, size: str = "bench", repeats: int = 20, warmup: int = 5,
             precisions: tuple[str, ...] = PRECISIONS, batch: int | None = None,
             cache_dir: str | Path | None = None) -> list[dict]:
    """One row per precision for reference model ``entry`` (key, number or registry entry); [] when
    ``unavailable_reason()`` says TensorRT cannot run here."""
    if unavailable_reason() is not None:
        return []

    entry = _entry(entry)
    _, fused = models(entry, size)
    (x,) = entry.inputs(size, batch=batch)
    n = x.shape[0]
    cache = Path(cache_dir) if cache_dir else engine_cache_dir()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for prec in precisions:
            onnx_path = Path(tmp) / f"{entry.key}.{size}.{prec}.onnx"
            onnx.save(with_allow_tf32(fused, 1 if prec == "tf32" else 0), str(onnx_path))
            engine_path = onnx_path.with_suffix(".plan")
            builder.build_engine(str(onnx_path), str(engine_path), precision=prec, min_batch=1, opt_batch=n,
                                 max_batch=n, cache_dir=cache, progress=False)
            eng = runtime.Engine.load(engine_path)
            name = eng.input_names[0]
            copies = [x.cuda().contiguous() for _ in range(rotation_count(x.numel() * x.element_size()))]
            eng.bind({name: copies[0]})  # shapes, output buffers; rotation only swaps the input address
            pointers = [c.data_ptr() for c in copies]

            def rotate(i: int, eng=eng, name=name, pointers=pointers) -> None:
                eng.context.set_tensor_address(name, pointers[i % len(pointers)])

            torch.cuda.synchronize()
            times = trt_execute_times_ms(eng, repeats, warmup=warmup, before_each=rotate)
            rows.append(summarise(entry.key, prec, n, times))
            del eng, copies
    return rows
