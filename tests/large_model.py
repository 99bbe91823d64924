"""Models over 2 GB made on the fly for the external-data tests and tools/large_model_bench.py.

X (N, K) · W (K, C) + B → GroupNormalization-21 → SiLU, with W in external data: a sparse file (``truncate``), so
the model takes no disk space and no time to write however large W is; a few marked blocks of W hold random bytes
so a copy can be checked without reading gigabytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

MARK_BYTES = 4096


def mark_offsets(nbytes: int) -> list[int]:
    """Byte offsets (within W) of the marked blocks: first, middle, last."""
    last = nbytes - MARK_BYTES
    return [0, (last // 2) // MARK_BYTES * MARK_BYTES, last]


def make_large_gemm_model(folder: Path, k: int, c: int, dtype=np.float32, groups: int = 32, name: str = "big",
                          seed: int = 0) -> tuple[Path, dict]:
    """Write ``<folder>/<name>.onnx`` + ``<name>.onnx.data`` (W of K x C ``dtype`` elements, sparse). Returns the
    model path and {offset: bytes} of the marked blocks."""
    folder = Path(folder)
    elem = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}[dtype]
    nbytes = k * c * np.dtype(dtype).itemsize
    data = folder / f"{name}.onnx.data"
    rng = np.random.default_rng(seed)
    marks = {}
    with open(data, "wb") as fh:
        fh.truncate(nbytes)
        for off in mark_offsets(nbytes):
            block = rng.standard_normal(MARK_BYTES // np.dtype(dtype).itemsize).astype(dtype).tobytes()
            fh.seek(off)
            fh.write(block)
            marks[off] = block
    w = TensorProto(name="W", data_type=elem, dims=[k, c], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", data.name), ("offset", "0"), ("length", str(nbytes))):
        w.external_data.add(key=key, value=value)
    params = [helper.make_tensor(n, elem, [c], rng.standard_normal(c).astype(dtype).tobytes(), raw=True)
              for n in ("B", "scale", "bias")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["z"]), helper.make_node("Add", ["z", "B"], ["zb"]),
             helper.make_node("GroupNormalization", ["zb", "scale", "bias"], ["gn"], num_groups=groups),
             helper.make_node("Sigmoid", ["gn"], ["sg"]), helper.make_node("Mul", ["gn", "sg"], ["y"])]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", elem, ["N", k])],
                              [helper.make_tensor_value_info("y", elem, ["N", c])], [w, *params])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = folder / f"{name}.onnx"
    onnx.save(model, str(path))  # W stays a reference: onnx.save writes no external data it was not given
    return path, marks


def external_tensor_info(model_path: Path, name: str) -> tuple[Path, int, int]:
    """(data file, offset, length) of the external tensor ``name``."""
    m = onnx.load(str(model_path), load_external_data=False)
    t = next(i for i in m.graph.initializer if i.name == name)
    info = {e.key: e.value for e in t.external_data}
    return model_path.parent / info["location"], int(info.get("offset", 0)), int(info["length"])


def read_at(path: Path, offset: int, n: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(n)


def disk_usage(path: Path) -> int:
    return os.stat(path).st_blocks * 512
