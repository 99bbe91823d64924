"""Export / fuse entry points behind ``fusedops export`` and ``fusedops fuse``.

Each function prints nothing and raises a ``FusedopsError`` subclass (one-line message naming the problem) for bad
input. Outputs go through ``fusedops.safe_output``: validated before the long work, written atomically, an existing
file replaced only with ``force=True``, never a directory, device or the input (see that module for the rules).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import onnx
from onnx import external_data_helper

from .catalog import quote
from .errors import InputFileError, OutputFileError, UsageError
from .safe_output import PendingOutput

_PROTOBUF_LIMIT = 2**31 - 1  # a single ONNX file (no external data) cannot be larger


def _entry(model_name: str):
    from fusedops.models.registry import get_entry

    if not isinstance(model_name, (str, int)) or isinstance(model_name, bool):
        raise UsageError(f"model must be a model key or number, got {type(model_name).__name__}")
    try:
        return get_entry(model_name)
    except ValueError as e:
        raise UsageError(str(e)) from None


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


def _read_input(path: Path) -> bytes:
    """The bytes of an input file; InputFileError naming why it cannot be read (never blocks on a FIFO)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InputFileError(f"input file {_q(path)} does not exist") from None
    except NotADirectoryError:
        raise InputFileError(f"input file {_q(path)} does not exist (a parent of it is a file)") from None
    except OSError as e:
        raise InputFileError(f"cannot read input {_q(path)}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except OSError:
            raise InputFileError(f"input {_q(path)} is a dangling symbolic link to {_q(os.readlink(path))}") \
                from None
    if stat.S_ISDIR(st.st_mode):
        raise InputFileError(f"input {_q(path)} is a directory, not an ONNX file")
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(f"input {_q(path)} is not a regular file")
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        raise InputFileError(f"cannot read input file {_q(path)}: {e.strerror or type(e).__name__}") from None


def _external_data_files(model: onnx.ModelProto, base: Path, src: Path) -> list[Path]:
    """Check every external-data reference (relative, inside the model's folder, no symbolic link on the way, the
    file present and long enough) and return the files; InputFileError naming the tensor and the problem."""
    files: list[Path] = []
    for t in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(t):
            continue
        info = external_data_helper.ExternalDataInfo(t)
        loc = info.location or ""
        where = f"{_q(src)}: tensor {quote(t.name)} stores its data in {_q(loc)}"
        parts = Path(loc).parts
        if not loc:
            raise InputFileError(f"{_q(src)}: tensor {quote(t.name)} uses external data without a location")
        if os.path.isabs(loc) or Path(loc).drive:
            raise InputFileError(f"{where}, an absolute path; external data must lie inside the model's folder")
        if ".." in parts:
            raise InputFileError(f"{where}, which leaves the model's folder ('..'); refusing to read it")
        cur = base
        for part in parts:
            cur = cur / part
            if cur.is_symlink():
                raise InputFileError(f"{where}, reached through the symbolic link {_q(cur)}; refusing to follow it")
        try:
            st = os.stat(cur)
        except FileNotFoundError:
            raise InputFileError(f"{where}, which does not exist") from None
        except OSError as e:
            raise InputFileError(f"{where}, which cannot be read: {e.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{where}, which is not a regular file")
        offset = int(info.offset or 0)
        length = int(info.length) if info.length is not None else st.st_size - offset
        if offset < 0 or length < 0 or offset + length > st.st_size:
            raise InputFileError(f"{where} at bytes {offset}..{offset + length}, but the file has {st.st_size} "
                                 f"bytes")
        if not os.access(cur, os.R_OK):
            raise InputFileError(f"{where}, which is not readable (permission denied)")
        files.append(cur)
    return files


def load_onnx_with_inputs(src) -> tuple[onnx.ModelProto, list[Path]]:
    """An ONNX file with its external data loaded, and every file it was read from; InputFileError naming the
    problem (missing, unreadable, not a regular file, not ONNX, bad external data)."""
    if src is None or str(src).strip() == "":
        raise InputFileError("input path is empty")
    path = Path(os.fspath(src)).expanduser()
    data = _read_input(path)
    if not data:
        raise InputFileError(f"input file {_q(path)} is empty, so not an ONNX file")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise InputFileError(f"{_q(path)} is not an ONNX file (protobuf could not parse it: "
                             f"{type(e).__name__})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise InputFileError(f"{_q(path)} is not an ONNX file (no graph)")
    if model.ir_version <= 0 or not model.opset_import:
        raise InputFileError(f"{_q(path)} is not an ONNX model (no IR version or opset import)")
    files = _external_data_files(model, path.parent, path)
    if files:
        try:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as e:  # noqa: BLE001 - anything the loader still finds
            raise InputFileError(f"{_q(path)}: its external data cannot be loaded ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else ''})") from None
    return model, [path, *files]


def load_onnx(src) -> onnx.ModelProto:
    """Load an ONNX file (external data included); InputFileError naming the problem."""
    return load_onnx_with_inputs(src)[0]


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


def fuse_file(src, dst, force: bool = False) -> Path:
    """Fuse the ONNX file ``src`` into ``dst``; the input (and its external data) is never modified. Returns the
    written path."""
    from fusedops.exporter.fuse import fuse_model

    _check_flag("force", force)
    model, inputs = load_onnx_with_inputs(src)
    with PendingOutput(dst, force, inputs=inputs) as pending:
        fused = fuse_model(model)
        return pending.commit(_serialize(fused, pending.path))


def fusion_summary(model) -> list[tuple[str, dict[str, object]]]:
    """(op_type, attributes) of each fused node of a ModelProto or an ONNX file, in graph order."""
    from fusedops.exporter.fuse import fusion_summary as _summary

    if not isinstance(model, onnx.ModelProto):
        model = load_onnx(model)
    return _summary(model)
