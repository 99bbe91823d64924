"""Load and save ONNX files for the fuser, with ONNX's external-data format and in bounded memory.

- ``load_model(src)``: the model proto without its external data (``onnx.load(load_external_data=False)``); every
  external location is checked first (relative, no ``..``, inside the model's folder after resolving symlinks, an
  existing file long enough for offset + length), then ONNX shape inference runs on the light proto and onnx-ir
  maps the external tensors lazily (mmap): the fuser reads only the small constants it inspects.
- ``save_model(model, dst, src_data_files, force)``: onnx-ir's ``ir.save``. A model that came with external data,
  or whose tensors exceed ``EXTERNAL_THRESHOLD_BYTES``, gets its tensors in ``<dst name>.data`` next to the output
  (ir.save copies external tensors file to file with ``copy_file_range``, so the weights never sit in memory twice,
  and replaces the data file atomically); the model file is written to a temp file in the output folder, checked
  with the ONNX checker and renamed. Nothing is read or written outside the model's and the output's folders; the
  input's files are never overwritten.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

import onnx
import onnx_ir as ir

from fusedops.errors import FusedopsError

# Above this the serialized proto would come close to protobuf's 2 GB limit: write external data instead.
EXTERNAL_THRESHOLD_BYTES = 1 << 30
DATA_SUFFIX = ".data"


@dataclass
class LoadedModel:
    model: ir.Model
    path: Path
    data_files: set[Path] = field(default_factory=set)  # resolved external data files of the input

    @property
    def has_external_data(self) -> bool:
        return bool(self.data_files)


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


def _all_tensors(model: onnx.ModelProto):
    yield from _graph_tensors(model.graph)
    for fn in model.functions:
        for node in fn.node:
            yield from _attr_tensors(node.attribute)


def _bad_location(location: str) -> str | None:
    if not location:
        return "is empty"
    if PurePosixPath(location).is_absolute() or PureWindowsPath(location).is_absolute() or location[:1] in "/\\":
        return "is absolute (external data must lie in the model's folder)"
    if ".." in PurePosixPath(location).parts or ".." in PureWindowsPath(location).parts:
        return "contains '..' (external data must lie in the model's folder)"
    return None


def check_external_data(model: onnx.ModelProto, folder: Path, what: str) -> set[Path]:
    """Validate every external-data reference of ``model`` against ``folder``; returns the resolved data files.
    FusedopsError names the tensor and the problem."""
    base = folder.resolve()
    files: set[Path] = set()
    sizes: dict[Path, int] = {}
    for t in _all_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        where = f"{what}: tensor {t.name!r}: external data location {info.get('location', '')!r}"
        problem = _bad_location(info.get("location", ""))
        if problem:
            raise FusedopsError(f"{where} {problem}")
        path = (folder / info["location"]).resolve()
        if path != base and base not in path.parents:
            raise FusedopsError(f"{where} resolves outside the model's folder (through a symbolic link)")
        if not path.is_file():
            raise FusedopsError(f"{where}: file {str(path.name)!r} not found next to the model")
        try:
            offset, length = int(info.get("offset", 0)), int(info["length"]) if "length" in info else None
        except ValueError:
            raise FusedopsError(f"{where}: offset / length are not integers") from None
        size = sizes.setdefault(path, path.stat().st_size)
        if offset < 0 or (length is not None and (length < 0 or offset + length > size)):
            raise FusedopsError(f"{where}: offset {offset} + length {length} is past the end of the "
                                f"{size}-byte file")
        files.add(path)
    return files


def load_model(src) -> LoadedModel:
    """Load an ONNX file for fusing (external data validated and memory-mapped, not read); FusedopsError if it is
    missing, not ONNX, or references external data it must not."""
    from .fuse import infer_shapes

    path = Path(src).expanduser()
    if not path.exists():
        raise FusedopsError(f"input file {str(path)!r} does not exist")
    if not path.is_file():
        raise FusedopsError(f"input {str(path)!r} is not a file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError and friends
        raise FusedopsError(f"{str(path)!r} is not an ONNX file ({type(e).__name__})") from None
    if not proto.graph.node and not proto.graph.output:
        raise FusedopsError(f"{str(path)!r} is not an ONNX file (no graph)")
    files = check_external_data(proto, path.parent, repr(str(path)))
    model = ir.serde.deserialize_model(infer_shapes(proto))
    ir.external_data.set_base_dir(model.graph, path.parent)
    return LoadedModel(model, path, files)


def tensor_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for g in model.graphs() for v in g.initializers.values()
               if v.const_value is not None)


def data_path_for(dst: Path) -> Path:
    return dst.parent / (dst.name + DATA_SUFFIX)


def save_model(model: ir.Model, dst: Path, source: LoadedModel | None = None, force: bool = False,
               external: bool | None = None) -> Path | None:
    """Write ``model`` to ``dst`` (already vetted by the caller: not the input, folder exists, overwrite allowed).
    ``external`` None: external data when the input had it or the tensors are large. Returns the data file
    written, if any."""
    if external is None:
        external = bool(source and source.has_external_data) or tensor_bytes(model) > EXTERNAL_THRESHOLD_BYTES
    data = data_path_for(dst) if external else None
    if data is not None:
        if source is not None and data.resolve() in source.data_files:
            raise FusedopsError(f"output data file {str(data)!r} is the input's external data; refusing to "
                                f"overwrite it (choose another output name)")
        if data.is_dir() or (data.exists() and not force):
            raise FusedopsError(f"output data file {str(data)!r} exists; pass force=True (--force) to overwrite it")
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    data_existed = data is not None and data.exists()
    try:
        ir.save(model, tmp, external_data=data.name if data is not None else None, size_threshold_bytes=1024)
        mode = 0o666 & ~_umask()  # mkstemp makes 0600; give the files the usual permissions
        os.chmod(tmp, mode)
        if data is not None and data.exists():
            os.chmod(data, mode)
        from .fuse import check_fused

        check_fused(tmp, str(source.path) if source is not None else tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        if data is not None and not data_existed:
            data.unlink(missing_ok=True)
        raise
    return data


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
