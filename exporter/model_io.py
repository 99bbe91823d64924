"""Load and save ONNX files for the fuser, with ONNX's external-data format and in bounded memory.

- ``load_model(src)``: the model proto without its external data; the input file and every external location are
  checked first (``fusedops.input_files``: relative, no ``..``, no symbolic link on the way, an existing file long
  enough for offset + length) and the model validated (``validate.checked_input``), then ONNX shape inference runs
  on the light proto and onnx-ir maps the external tensors lazily (mmap): the fuser reads only the small constants
  it inspects.
- ``save_model(model, dst, src_data_files, force)``: onnx-ir's ``ir.save``. A model that came with external data,
  or whose tensors exceed ``EXTERNAL_THRESHOLD_BYTES``, gets its tensors in ``<dst name>.data`` next to the output
  (ir.save copies external tensors file to file with ``copy_file_range``, so the weights never sit in memory twice,
  and replaces the data file atomically); the model file is written to a temp file in the output folder, checked
  with the ONNX checker and renamed. Nothing is read or written outside the model's and the output's folders; the
  input's files are never overwritten.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx_ir as ir

from fusedops.errors import InputFileError
from fusedops.input_files import external_data_files, parse_model, read_input_file
from fusedops.safe_output import PendingOutput, check_output_path

from . import validate
from .fuse import check_fused, check_opset, infer_shapes

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


def load_model(src) -> LoadedModel:
    """Load an ONNX file for fusing: the input file and every external-data location checked
    (``fusedops.input_files``), the model validated (``validate.checked_input``), external tensors memory-mapped,
    not read. InputFileError / ModelError name the problem."""
    if src is None or str(src).strip() == "":
        raise InputFileError("input path is empty")
    path = Path(os.fspath(src)).expanduser()
    proto = parse_model(path, read_input_file(path))
    files = {f.resolve() for f in external_data_files(proto, path.parent, path)}
    opset = check_opset(next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None))
    proto = validate.checked_input(proto, opset)
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
    """Write ``model`` to ``dst`` under ``fusedops.safe_output``'s rules (never a directory, device or an input file;
    an existing file only with ``force``; atomic). ``external`` None: external data when the input had it or the
    tensors are large; the data file ``<dst>.data`` is checked by the same rules. Returns the data file written, if
    any."""
    if external is None:
        external = bool(source and source.has_external_data) or tensor_bytes(model) > EXTERNAL_THRESHOLD_BYTES
    inputs = [source.path, *source.data_files] if source is not None else []
    data = data_path_for(dst) if external else None
    if data is not None:
        check_output_path(data, force, inputs, what="output data file")
    data_existed = data is not None and data.exists()

    def write(tmp: Path) -> None:
        # ir.save writes the data file next to tmp, i.e. at `data` (same folder), copying external tensors file
        # to file; the model file is checked before it is put in place.
        ir.save(model, tmp, external_data=data.name if data is not None else None, size_threshold_bytes=1024)
        if data is not None and data.exists():
            os.chmod(data, 0o666 & ~_umask())
        check_fused(str(tmp), str(source.path) if source is not None else str(tmp))

    try:
        with PendingOutput(dst, force, inputs) as pending:
            if data is None:  # tensors inside the file: the bytes go through safe_output's own writer
                proto = ir.to_proto(model)
                check_fused(proto, str(source.path) if source is not None else proto)
                pending.commit(proto.SerializeToString())
            else:
                pending.commit_file(write)
    except BaseException:
        if data is not None and not data_existed:
            data.unlink(missing_ok=True)
        raise
    return data


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
