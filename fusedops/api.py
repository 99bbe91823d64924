"""Python API; each function mirrors one ``fusedops`` subcommand. Implementations import lazily."""

from __future__ import annotations


def export(model: str, out: str, size: str = "small", dynamic_batch: bool = True, force: bool = False, **kw):
    from .exporter_api import export as _export
    return _export(model, out, size=size, dynamic_batch=dynamic_batch, force=force, **kw)


def fuse(src: str, dst: str, force: bool = False, report: str | None = None):
    """Fuse an ONNX file; returns a FuseResult (path-like: the output) whose ``.report`` is the fusion report."""
    from .exporter_api import fuse_file
    return fuse_file(src, dst, force=force, report=report)


def demo(**kw):
    from .demo import run_demo
    return run_demo(**kw)


def verify(model_or_onnx: str, backend: str = "ort-cpu", **kw):
    from .verify import verify as _verify
    return _verify(model_or_onnx, backend=backend, **kw)


def bench(**kw):
    from .bench import run_bench
    return run_bench(**kw)


def build(onnx_path: str, engine: str, **kw):
    from .trt_build.builder import build_engine
    return build_engine(onnx_path, engine, **kw)


def build_native(cuda: str = "auto", verbose: bool = False):
    """``fusedops build-native``: configure and build the native libraries; returns the folder holding them."""
    from .plugins import native
    return native.build(cuda=cuda, verbose=verbose)
