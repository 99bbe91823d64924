"""Backends that run a fused model, and the comparison with eager PyTorch that the demo and `fusedops verify` share.

A backend takes the reference model entry, the fused ONNX file and the inputs, and returns outputs plus a median
latency. Each one says whether it can run here and, if not, why (shown in the demo table instead of a result).
"""

from __future__ import annotations

import copy
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnxruntime as ort
import torch

from .. import ort as fo_ort
from .. import safe_output
from ..errors import FusedopsError, UsageError
from ..exporter_api import export
from ..models import get_entry
from ..plugins import native
from ..trt_build import builder, runtime
from .names import BACKEND_NAMES

# Pass/fail tolerances against eager PyTorch (float32 inputs), per backend precision.
TOLERANCES = {
    "fp32": dict(atol=1e-4, rtol=1e-4),  # CPU float32, strict FP32 GPU
    "tf32": dict(atol=1e-2, rtol=1e-2),  # the reference-models spec's TF32 tolerance
}


@dataclass
class BackendResult:
    model: str
    backend: str
    ok: bool | None  # None: not run (see note)
    max_abs_err: float | None = None
    median_ms: float | None = None
    note: str = ""


@dataclass
class RunContext:
    entry: object  # models.ModelEntry
    size: str
    model: torch.nn.Module  # eager reference (float32, CPU)
    onnx_path: Path  # fused ONNX
    unfused_path: Path | None
    inputs: list[torch.Tensor]  # CPU float32
    repeats: int = 10
    _references: dict = None

    def reference(self, device: str) -> torch.Tensor:
        """Eager PyTorch output in strict float32 on `device` (CPU for CPU backends, the GPU for GPU ones)."""
        self._references = self._references or {}
        if device not in self._references:
            model = self.model if device == "cpu" else _copy_to(self.model, device)
            prev = torch.get_float32_matmul_precision()
            prev_cudnn = torch.backends.cudnn.allow_tf32  # convolutions (model 4's ConvTranspose) use TF32 too
            torch.set_float32_matmul_precision("highest")
            torch.backends.cudnn.allow_tf32 = False
            try:
                with torch.no_grad():
                    out = model(*[t.to(device) for t in self.inputs])
            finally:
                torch.set_float32_matmul_precision(prev)
                torch.backends.cudnn.allow_tf32 = prev_cudnn
            self._references[device] = out.cpu()
        return self._references[device]


@dataclass
class Backend:
    name: str
    precision: str  # key of TOLERANCES
    available: Callable[[], str | None]  # None if usable, else the reason it is not
    run: Callable[[RunContext], tuple[list[np.ndarray], float]]
    device: str = "cpu"
    timed: str = "host arrays, wall time of one run"  # what median_ms measures (shown in the demo table)


def _copy_to(model: torch.nn.Module, device: str) -> torch.nn.Module:
    return copy.deepcopy(model).to(device)


def _median_ms(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# ---- ONNX Runtime ---------------------------------------------------------------------------------------------------

def _ort_feed(sess, inputs):
    return {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs)}


def _ort_functions_available():
    return None  # onnxruntime is a dependency


def _ort_functions_run(ctx: RunContext):
    sess = ort.InferenceSession(str(ctx.onnx_path), providers=["CPUExecutionProvider"])
    feed = _ort_feed(sess, ctx.inputs)
    out = sess.run(None, feed)
    return out, _median_ms(lambda: sess.run(None, feed), ctx.repeats)


def _ort_library_available(provider: str):
    def check():
        reason = fo_ort.unavailable_reason(provider) if hasattr(fo_ort, "unavailable_reason") else None
        if reason:
            return reason
        if provider not in ort.get_available_providers():
            return f"{provider} not in this onnxruntime build"
        try:
            fo_ort.library_path()
        except FusedopsError as e:
            return str(e)
        return None
    return check


def _ort_library_run(provider: str):
    def run(ctx: RunContext):
        if provider == "CPUExecutionProvider":
            sess = fo_ort.session(str(ctx.onnx_path), providers=[provider])
            feed = _ort_feed(sess, ctx.inputs)
            out = sess.run(None, feed)
            return out, _median_ms(lambda: sess.run(None, feed), ctx.repeats)
        # CUDA EP: inputs and outputs bound to device buffers (IOBinding), so the timed runs copy nothing between
        # host and device, like the torch-cuda row; each run returns when its results are ready.
        sess = fo_ort.session(str(ctx.onnx_path), providers=[provider, "CPUExecutionProvider"])
        io = sess.io_binding()
        keep = []
        for i, t in zip(sess.get_inputs(), ctx.inputs):
            v = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(t.numpy()), "cuda", 0)
            keep.append(v)
            io.bind_ortvalue_input(i.name, v)
        for o in sess.get_outputs():
            io.bind_output(o.name, "cuda", 0)
        sess.run_with_iobinding(io)
        out = [v.numpy() for v in io.get_outputs()]
        return out, _median_ms(lambda: sess.run_with_iobinding(io), ctx.repeats)
    return run


# ---- PyTorch fused models (custom ops on CUDA) -----------------------------------------------------------------------

def _torch_cuda_available():
    if not torch.cuda.is_available():
        return "no CUDA device"
    if native.library_path("fusedops") is None:
        return "fusedops CUDA library not built (run `fusedops build-native`)"
    return None


def _torch_fused_run(device: str):
    def run(ctx: RunContext):
        module = ctx.entry.module
        if not hasattr(module, "ModelNew"):
            raise FusedopsError(f"{ctx.entry.key} has no ModelNew")
        fused = module.ModelNew(*ctx.entry.sizes(ctx.size).init_inputs).to(device).eval()
        fused.load_state_dict(ctx.model.state_dict())
        xs = [t.to(device) for t in ctx.inputs]
        prev = torch.get_float32_matmul_precision()
        # GPU: TF32, the default precision of the GPU runtimes; CPU: float32 (the CPU ops ignore the setting).
        torch.set_float32_matmul_precision("high" if device == "cuda" else "highest")
        try:
            with torch.no_grad():
                out = fused(*xs)
                # Synchronous wall time of one call, as the ort-cuda row measures it.
                call = (lambda: (fused(*xs), torch.cuda.synchronize())) if device == "cuda" else (lambda: fused(*xs))
                ms = _median_ms(call, ctx.repeats)
        finally:
            torch.set_float32_matmul_precision(prev)
        return [out.float().cpu().numpy()], ms
    return run


# ---- TensorRT ---------------------------------------------------------------------------------------------------------

def _trt_available():
    """None when TensorRT, pycuda, a CUDA device and the plugin library are all here; else the first reason."""
    try:  # lazy: optional (gpu extra); its absence is the reason returned
        import tensorrt  # noqa: F401
    except Exception as e:  # ImportError or a broken install
        return f"TensorRT not importable ({type(e).__name__})"
    try:  # lazy: optional (gpu extra), as tensorrt above
        import pycuda.driver  # noqa: F401
    except Exception as e:
        return f"pycuda not importable ({type(e).__name__})"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if builder.default_plugin_library() is None:
        return (f"TensorRT plugin library not built ({builder.PLUGIN_LIBRARY_NAME}; set $FUSEDOPS_TRT_PLUGIN or "
                f"run `fusedops build-native`)")
    return None


def engine_cache_dir() -> Path:
    """Where verify and the bench keep built engines: $FUSEDOPS_ENGINE_CACHE, else ~/.cache/fusedops/engines."""
    return Path(os.environ.get("FUSEDOPS_ENGINE_CACHE", Path.home() / ".cache" / "fusedops" / "engines"))


def trt_execute_times_ms(eng, repeats: int, warmup: int = 3, before_each: Callable[[int], None] | None = None) \
        -> list[float]:
    """Times of ``eng.execute()`` alone (buffers already bound) with CUDA events on the engine's stream, in ms.
    ``before_each(i)``, outside the timed region, may rebind inputs (e.g. rotate them)."""
    import pycuda.driver as cuda  # lazy: optional (gpu extra), only on the TensorRT path

    stream = eng.stream
    for i in range(warmup):
        if before_each:
            before_each(i)
        eng.execute()
    stream.synchronize()
    times = []
    start, end = cuda.Event(), cuda.Event()
    for i in range(repeats):
        if before_each:
            before_each(warmup + i)
        start.record(stream)
        eng.execute()
        end.record(stream)
        end.synchronize()
        times.append(start.time_till(end))
    return times


def _trt_run(ctx: RunContext):
    engine_path = ctx.onnx_path.with_suffix(".plan")
    engine_path.unlink(missing_ok=True)  # a fresh path: the engine cache supplies a built engine for the same key
    batch = ctx.inputs[0].shape[0]
    builder.build_engine(str(ctx.onnx_path), str(engine_path), precision="tf32", min_batch=1, opt_batch=batch,
                         max_batch=max(batch, 8), cache_dir=engine_cache_dir(), progress=False)
    eng = runtime.Engine.load(engine_path)
    xs = [t.cuda().contiguous() for t in ctx.inputs]  # torch tensors: __cuda_array_interface__ buffers
    out = eng.run(xs)  # binds once; the timed runs reuse those buffers
    outputs = [runtime.to_numpy(buf) for buf in out.values()]
    ms = statistics.median(trt_execute_times_ms(eng, ctx.repeats))
    return outputs, ms


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in [
        Backend("ort-cpu-functions", "fp32", _ort_functions_available, _ort_functions_run),
        Backend("ort-cpu", "fp32", _ort_library_available("CPUExecutionProvider"),
                _ort_library_run("CPUExecutionProvider")),
        Backend("ort-cuda", "tf32", _ort_library_available("CUDAExecutionProvider"),
                _ort_library_run("CUDAExecutionProvider"), device="cuda",
                timed="device buffers (IOBinding), synchronous wall time of one run"),
        Backend("torch-cpu", "fp32", lambda: None, _torch_fused_run("cpu"), timed="CPU tensors, wall time of one call"),
        Backend("torch-cuda", "tf32", _torch_cuda_available, _torch_fused_run("cuda"), device="cuda",
                timed="device tensors, synchronous wall time of one call"),
        Backend("trt", "tf32", _trt_available, _trt_run, device="cuda",
                timed="device buffers, GPU time of execute (CUDA events)"),
    ]
}
assert tuple(BACKENDS) == BACKEND_NAMES, "workflows/names.py lists the backends the CLI offers: keep it in step"


def compare(model: str, backend: Backend, outputs, reference: torch.Tensor, median_ms: float,
            tolerance: dict | None = None) -> BackendResult:
    got = np.asarray(outputs[0], dtype=np.float64)
    want = reference.detach().double().numpy()
    if got.shape != want.shape:
        return BackendResult(model, backend.name, False, None, median_ms,
                             f"shape {got.shape} != eager {want.shape}")
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    tol = tolerance or TOLERANCES[backend.precision]
    ok = bool(np.allclose(got, want, **tol)) and not np.isnan(got).any()
    return BackendResult(model, backend.name, ok, err, median_ms, backend.precision)


def run_backend(ctx: RunContext, backend: Backend, tolerance: dict | None = None) -> BackendResult:
    """``tolerance``: {"atol", "rtol"} instead of the backend precision's (TOLERANCES)."""
    reason = backend.available()
    if reason:
        return BackendResult(ctx.entry.key, backend.name, None, note=f"skipped: {reason}")
    outputs, ms = backend.run(ctx)
    r = compare(ctx.entry.key, backend, outputs, ctx.reference(backend.device), ms, tolerance)
    r.note = f"{r.note}; timed: {backend.timed}" if r.note else f"timed: {backend.timed}"
    return r


def _check_arguments(model, backend, size, batch, seed, force) -> None:
    """UsageError naming the first bad argument (before any export)."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if size not in ("small", "bench"):
        raise UsageError(f"size must be 'small' or 'bench', got {size!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise UsageError(f"batch must be a positive integer (or None for the model's default), got {batch!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed must be a non-negative integer, got {seed!r}")
    if not isinstance(force, bool):
        raise UsageError(f"force must be True or False, got {force!r}")
    if not isinstance(model, (str, int)) or isinstance(model, bool):
        raise UsageError(f"model must be a model key or number, got {type(model).__name__}")


def _tolerance(backend: str, atol, rtol) -> dict | None:
    if atol is None and rtol is None:
        return None
    tol = dict(TOLERANCES[BACKENDS[backend].precision])
    for name, v in (("atol", atol), ("rtol", rtol)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise UsageError(f"{name} must be a non-negative number, got {v!r}")
        tol[name] = float(v)
    return tol


def verify(model: str, backend: str = "ort-cpu", size: str = "small", workdir: str | None = None,
           batch: int | None = None, seed: int = 0, force: bool = False, atol: float | None = None,
           rtol: float | None = None) -> BackendResult:
    """Export + fuse a reference model, run it on one backend, compare with eager PyTorch. ``workdir`` keeps the
    fused ONNX file (an earlier one there is replaced only with ``force=True``); default: a temporary folder.
    ``atol`` / ``rtol`` replace the backend precision's tolerance (TOLERANCES)."""
    _check_arguments(model, backend, size, batch, seed, force)
    tolerance = _tolerance(backend, atol, rtol)
    try:
        entry = get_entry(model)
    except ValueError as e:
        raise UsageError(str(e)) from None
    b = BACKENDS[backend]
    reason = b.available()
    if reason:
        raise FusedopsError(f"backend {backend} cannot run here: {reason}")
    name = f"{entry.key}.{size}.fused.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        base = safe_output.prepare_dir(workdir, [name], force) if workdir is not None else Path(tmp)
        onnx_path = base / name
        export(entry.key, str(onnx_path), size=size, force=force)
        ref_model = entry.build(size, seed=seed)
        gen = torch.Generator().manual_seed(seed + 1)
        inputs = entry.inputs(size, batch=batch, generator=gen)
        ctx = RunContext(entry, size, ref_model, onnx_path, None, inputs)
        return run_backend(ctx, b, tolerance)
