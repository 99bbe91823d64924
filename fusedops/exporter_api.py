"""Export / fuse entry points behind ``fusedops export`` and ``fusedops fuse``.

Each function prints nothing and raises ``FusedopsError`` (one-line message naming the problem) for bad input.
Outputs are written atomically (temp file in the destination folder + rename): a failure leaves nothing behind,
an existing output is replaced only with ``force=True``, and the input file is never overwritten.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from .errors import FusedopsError

if TYPE_CHECKING:  # the exporter imports torch: keep it out of plain `import fusedops`
    from fusedops.exporter.report import FusionReport


def _entry(model_name: str):
    from fusedops.models.registry import get_entry

    try:
        return get_entry(model_name)
    except ValueError as e:
        raise FusedopsError(str(e)) from None


def _check_size(size: str) -> None:
    if size not in ("small", "bench"):
        raise FusedopsError(f"size must be 'small' or 'bench', got {size!r}")


def _prepare_output(out, force: bool, src: Path | None = None) -> Path:
    dst = Path(out).expanduser()
    if str(out).strip() == "":
        raise FusedopsError("output path is empty")
    if src is not None and dst.resolve() == src.resolve():
        raise FusedopsError(f"output {str(dst)!r} is the input file; refusing to overwrite the input")
    if dst.is_dir():
        raise FusedopsError(f"output {str(dst)!r} is a directory")
    if dst.exists() and not force:
        raise FusedopsError(f"output {str(dst)!r} exists; pass force=True (--force) to overwrite it")
    if not dst.parent.exists():
        raise FusedopsError(f"output folder {str(dst.parent)!r} does not exist")
    return dst


def _save_atomic(model: onnx.ModelProto, dst: Path) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(model.SerializeToString())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dst


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def load_onnx(src) -> onnx.ModelProto:
    """Load an ONNX file; FusedopsError if it is missing or not an ONNX model."""
    path = Path(src).expanduser()
    if not path.exists():
        raise FusedopsError(f"input file {str(path)!r} does not exist")
    if not path.is_file():
        raise FusedopsError(f"input {str(path)!r} is not a file")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # protobuf DecodeError and friends
        raise FusedopsError(f"{str(path)!r} is not an ONNX file ({type(e).__name__})") from None
    if not model.graph.node and not model.graph.output:
        raise FusedopsError(f"{str(path)!r} is not an ONNX file (no graph)")
    return model


def export_unfused_model(model_name: str, size: str = "small", dynamic_batch: bool = True) -> onnx.ModelProto:
    """The standard ONNX export of a reference model (torch dynamo exporter, dynamic batch dim "batch")."""
    from fusedops.exporter.export import export_model

    _check_size(size)
    return export_model(_entry(model_name), size=size, dynamic_batch=dynamic_batch)


def export_fused_model(model_name: str, size: str = "small", dynamic_batch: bool = True) -> onnx.ModelProto:
    from fusedops.exporter.fuse import fuse_model

    return fuse_model(export_unfused_model(model_name, size=size, dynamic_batch=dynamic_batch))


def export(model_name: str, out, size: str = "small", dynamic_batch: bool = True, force: bool = False,
           fuse: bool = True) -> Path:
    """Export reference model ``model_name`` (key, number or module name) to ``out``: torch → ONNX → fused ONNX
    (``fuse=False``: the standard export only), checked with the ONNX checker. Returns the written path."""
    _entry(model_name)
    _check_size(size)
    dst = _prepare_output(out, force)
    model = (export_fused_model if fuse else export_unfused_model)(model_name, size=size,
                                                                    dynamic_batch=dynamic_batch)
    onnx.checker.check_model(model, full_check=True)
    return _save_atomic(model, dst)


def export_unfused(model_name: str, out, size: str = "small", dynamic_batch: bool = True,
                   force: bool = False) -> Path:
    return export(model_name, out, size=size, dynamic_batch=dynamic_batch, force=force, fuse=False)


@dataclass
class FuseResult:
    """What ``fuse_file`` (``fusedops.fuse``) wrote: the model, its external data file (None when the tensors are
    inside the model file) and the fusion report. Path-like: ``os.fspath(result)`` is the model's path."""

    path: Path
    report: FusionReport
    data_path: Path | None = None

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)


def fuse_file(src, dst, force: bool = False, report=None) -> FuseResult:
    """Fuse the ONNX file ``src`` into ``dst``; the input's files are never modified. A model with external data
    (or over 1 GB of tensors) is written with its tensors in ``<dst>.data`` next to ``dst``, in bounded memory.
    ``report``: also write the fusion report there as JSON. Returns the paths and the report."""
    from fusedops.exporter.fuse import fuse_ir
    from fusedops.exporter.model_io import load_model, save_model

    src_path = Path(src).expanduser()
    loaded = load_model(src_path)
    dst_path = _prepare_output(dst, force, src=src_path)
    report_path = None
    if report is not None:
        report_path = Path(report).expanduser()
        if report_path.resolve() in ({src_path.resolve(), dst_path.resolve()} | loaded.data_files):
            raise FusedopsError(f"report {str(report_path)!r} would overwrite a model file")
        if not report_path.parent.is_dir():
            raise FusedopsError(f"report folder {str(report_path.parent)!r} does not exist")
    fns, fusion_report = fuse_ir(loaded.model)
    if not fns:  # nothing fused: write the input as it was, not its canonicalised form
        loaded = load_model(src_path)
    data = save_model(loaded.model, dst_path, loaded, force=force)
    if report_path is not None:
        fusion_report.write_json(report_path)
    return FuseResult(dst_path, fusion_report, data)


def fusion_summary(model) -> list[tuple[str, dict[str, object]]]:
    """(op_type, attributes) of each fused node of a ModelProto or an ONNX file, in graph order."""
    from fusedops.exporter.fuse import fusion_summary as _summary

    if not isinstance(model, onnx.ModelProto):
        model = load_onnx(model)
    return _summary(model)
