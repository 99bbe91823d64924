"""Python API; each function mirrors one ``fusedops`` subcommand. Implementations are imported inside each function
(``# lazy:``): ``import fusedops`` (and so ``fusedops --help``) must not import torch, onnx or a runtime."""

from __future__ import annotations

from .errors import UsageError
from .workflows.names import is_onnx_file_argument


def export(model: str, out: str, size: str = "small", dynamic_batch: bool = True, force: bool = False, **kw):
    from .exporter_api import export as _export  # lazy: torch, onnx
    return _export(model, out, size=size, dynamic_batch=dynamic_batch, force=force, **kw)


def fuse(src: str, dst: str, force: bool = False, report: str | None = None):
    """Fuse an ONNX file; returns a FuseResult (path-like: the output) whose ``.report`` is the fusion report."""
    from .exporter_api import fuse_file  # lazy: torch, onnx
    return fuse_file(src, dst, force=force, report=report)


def demo(models=None, backends=None, size: str | None = None, out_dir=None, repeats: int = 10, seed: int = 0,
         force: bool = False, **kw):
    """``fusedops demo``; arguments are checked before any export (UsageError naming the first bad one)."""
    from .workflows.demo import run_demo  # lazy: torch, onnx

    for name, items in (("models", models), ("backends", backends)):
        if items is not None and (isinstance(items, (str, bytes)) or not all(
                isinstance(m, (str, int)) and not isinstance(m, bool) for m in items)):
            raise UsageError(f"{name} must be a list of names (or None for all), got {items!r}")
    if size not in (None, "small", "bench"):
        raise UsageError(f"size must be 'small', 'bench' or None, got {size!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise UsageError(f"repeats must be a positive integer, got {repeats!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed must be a non-negative integer, got {seed!r}")
    if not isinstance(force, bool):
        raise UsageError(f"force must be True or False, got {force!r}")
    return run_demo(models=list(models) if models is not None else None, backends=backends, size=size,
                    out_dir=out_dir, repeats=repeats, seed=seed, force=force, **kw)


def verify(model_or_onnx, backend: str = "ort-cpu", **kw):
    """``fusedops verify``. An ONNX file (a path ending in .onnx, or a path object): its fused form on the fusedops
    library against the model unfused on plain ONNX Runtime (and a PyTorch module with ``torch_module=``); keywords
    ``atol rtol batch shapes seed torch_module``; returns an OnnxVerifyResult. Otherwise a reference-model key: one
    backend against eager PyTorch (keywords ``size batch seed atol rtol workdir force``); returns a BackendResult."""
    if is_onnx_file_argument(model_or_onnx):
        from .workflows.verify_onnx import verify_onnx  # lazy: torch, onnx
        return verify_onnx(model_or_onnx, backend=backend, **kw)
    from .workflows.verify import verify as _verify  # lazy: torch, onnx
    return _verify(model_or_onnx, backend=backend, **kw)


def bench(**kw):
    from .benchmark.gpu import run_bench  # lazy: torch, onnx
    return run_bench(**kw)


def build(onnx_path: str, engine: str, **kw):
    from .trt_build.builder import build_engine  # lazy: onnx, then TensorRT
    return build_engine(onnx_path, engine, **kw)


def build_native(cuda: str = "auto", verbose: bool = False):
    """``fusedops build-native``: configure and build the native libraries; returns the folder holding them."""
    from .plugins import native  # lazy: subprocess, shutil: `import fusedops` stays at ~15 ms
    return native.build(cuda=cuda, verbose=verbose)
