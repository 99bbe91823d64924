"""Reading the user's ONNX files: every problem of an input file or of its external data named in one line
(``InputFileError``) before anything is parsed or fused, and nothing read from outside the model's folder.

    check_input_file(path)                     missing, a directory, a FIFO, a dangling symbolic link
    read_input_file(path)                      the bytes, or why they cannot be read
    parse_model(path, data)                    protobuf parse and the minimum of an ONNX model (graph, IR, opset)
    external_data_files(model, folder, path)   every external location relative, inside the folder, no symbolic
                                               link on the way, present and long enough; returns the files
    load_onnx_with_inputs(src, load_external)  all of the above; the model (external data loaded into memory unless
                                               ``load_external=False``, for the fuser's bounded-memory path) and the
                                               files it was read from
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import onnx
from onnx import external_data_helper

from .catalog import quote
from .errors import InputFileError

def _q(path) -> str:
    return quote(os.fsdecode(path), limit=200)


def check_input_file(path: Path) -> None:
    """InputFileError naming why ``path`` cannot be read as an input file (never blocks on a FIFO)."""
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


def read_input_file(path: Path) -> bytes:
    """The bytes of an input file; InputFileError naming why it cannot be read."""
    check_input_file(path)
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        raise InputFileError(f"cannot read input file {_q(path)}: {e.strerror or type(e).__name__}") from None


def _graph_tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _attr_tensors(node.attribute)


def _attr_tensors(attrs):
    for a in attrs:
        if a.HasField("t"):
            yield a.t
        yield from a.tensors
        if a.HasField("g"):
            yield from _graph_tensors(a.g)
        for g in a.graphs:
            yield from _graph_tensors(g)


def all_tensors(model: onnx.ModelProto):
    """Every TensorProto of a model: initializers, sparse ones, attributes (subgraphs and function bodies too)."""
    yield from _graph_tensors(model.graph)
    for fn in model.functions:
        for node in fn.node:
            yield from _attr_tensors(node.attribute)


def external_data_files(model: onnx.ModelProto, base: Path, src: Path) -> list[Path]:
    """Check every external-data reference (relative, inside the model's folder, no symbolic link on the way, the
    file present and long enough) and return the files; InputFileError naming the tensor and the problem."""
    files: list[Path] = []
    for t in all_tensors(model):
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


def parse_model(path: Path, data: bytes) -> onnx.ModelProto:
    """The ModelProto in ``data`` (read from ``path``); InputFileError when it is not an ONNX model."""
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
    return model


def load_onnx_with_inputs(src, load_external: bool = True) -> tuple[onnx.ModelProto, list[Path]]:
    """An ONNX file and every file it was read from; InputFileError naming the problem (missing, unreadable, not a
    regular file, not ONNX, bad external data). ``load_external=False`` leaves the external tensors on disk (their
    locations still checked)."""
    if src is None or str(src).strip() == "":
        raise InputFileError("input path is empty")
    path = Path(os.fspath(src)).expanduser()
    model = parse_model(path, read_input_file(path))
    files = external_data_files(model, path.parent, path)
    if files and load_external:
        try:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as e:  # noqa: BLE001 - anything the loader still finds
            raise InputFileError(f"{_q(path)}: its external data cannot be loaded ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else ''})") from None
    return model, [path, *files]
