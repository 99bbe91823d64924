"""Export / fuse entry points behind ``fusedops export`` and ``fusedops fuse``.

Each function prints nothing and raises a ``FusedopsError`` subclass (one-line message naming the problem) for bad
input. Outputs go through ``fusedops.safe_output``: validated before the long work, written atomically, an existing
file replaced only with ``force=True``, never a directory, device or the input (see that module for the rules).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from . import input_files
from .catalog import quote
from .errors import OutputFileError, UsageError
from .exporter.export import export_model
from .exporter.fuse import fuse_ir, fuse_model
from .exporter.fuse import fusion_summary as _summary
from .exporter.model_io import load_model, save_model
from .input_files import load_onnx_with_inputs  # noqa: F401 - part of this module's API
from .models.registry import get_entry
from .safe_output import PendingOutput, check_output_path, write_bytes

if TYPE_CHECKING:  # the exporter imports torch: keep it out of plain `import fusedops`
    from fusedops.exporter.report import FusionReport

_PROTOBUF_LIMIT = 2**31 - 1  # a single ONNX file (no external data) cannot be larger


def _entry(model_name: str):
    if not isinstance(model_name, (str, int)) or isinstance(model_name, bool):
        raise UsageError(f"model must be a model key or number, got {type(model_name).__name__}")
    return get_entry(model_name)


def _check_size(size: str) -> None:
    if size not in ("small", "bench"):
        raise UsageError(f"size must be 'small' or 'bench', got {size!r}")


def _check_flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, got {value!r}")


def _serialize(model: onnx.ModelProto, dst: Path) -> bytes:
    if model.ByteSize() > _PROTOBUF_LIMIT:
        raise OutputFileError(f"the model for {quote(str(dst))} is {model.ByteSize()} bytes, over protobuf's 2 GB "
                              f"limit for one ONNX file")
    return model.SerializeToString()


def _q(path) -> str:
    return quote(os.fsdecode(path), limit=200)


def load_onnx(src) -> onnx.ModelProto:
    """Load an ONNX file (external data included); InputFileError naming the problem."""
    return input_files.load_onnx_with_inputs(src)[0]


def export_unfused_model(model_name: str, size: str = "small", dynamic_batch: bool = True) -> onnx.ModelProto:
    """The standard ONNX export of a reference model (torch dynamo exporter, dynamic batch dim "batch")."""
    _check_size(size)
    return export_model(_entry(model_name), size=size, dynamic_batch=dynamic_batch)


def export_fused_model(model_name: str, size: str = "small", dynamic_batch: bool = True) -> onnx.ModelProto:
    return fuse_model(export_unfused_model(model_name, size=size, dynamic_batch=dynamic_batch))


def export(model_name: str, out, size: str = "small", dynamic_batch: bool = True, force: bool = False,
           fuse: bool = True) -> Path:
    """Export reference model ``model_name`` (key, number or module name) to ``out``: torch → ONNX → fused ONNX
    (``fuse=False``: the standard export only), checked with the ONNX checker. The output is validated before the
    export (which takes seconds to minutes). Returns the written path."""
    _entry(model_name)
    _check_size(size)
    for name, flag in (("dynamic_batch", dynamic_batch), ("force", force), ("fuse", fuse)):
        _check_flag(name, flag)
    with PendingOutput(out, force) as pending:
        model = (export_fused_model if fuse else export_unfused_model)(model_name, size=size,
                                                                        dynamic_batch=dynamic_batch)
        onnx.checker.check_model(model, full_check=True)
        return pending.commit(_serialize(model, pending.path))


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
    ``report``: also write the fusion report there as JSON. Every input and output problem is named before the
    fusion runs. Returns the paths and the report."""
    _check_flag("force", force)
    loaded = load_model(src)
    inputs = [loaded.path, *loaded.data_files]
    dst_path = check_output_path(dst, force, inputs)
    report_path = None
    if report is not None:
        report_path = check_output_path(report, force, [*inputs, dst_path], what="report")
        if report_path.resolve() == dst_path.resolve():
            raise OutputFileError(f"report {_q(report_path)} is the output model; choose another name")
    fns, fusion_report = fuse_ir(loaded.model)
    if not fns:  # nothing fused: write the input as it was, not its canonicalised form
        loaded = load_model(src)
    data = save_model(loaded.model, dst_path, loaded, force=force)
    if report_path is not None:
        write_bytes(report_path, fusion_report.to_json().encode(), force, [*inputs, dst_path], what="report")
    return FuseResult(dst_path, fusion_report, data)


def fusion_summary(model) -> list[tuple[str, dict[str, object]]]:
    """(op_type, attributes) of each fused node of a ModelProto or an ONNX file, in graph order."""
    if not isinstance(model, onnx.ModelProto):
        model = load_onnx(model)
    return _summary(model)
