"""Helpers shared by the hostile-input tests (tests/test_hostile_*.py): the native library through ctypes with raw
bytes, both chain parsers in one result format, small hand-built ONNX models, and the CLI in a subprocess."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from fusedops import catalog
from native_support import require_native_build

ROOT = Path(__file__).resolve().parent.parent
ERR_BUF = 1024

_LIB = None


def native_lib():
    """libfusedops.so (built here if needed); pytest.skip with the reason when it cannot be built."""
    global _LIB
    if _LIB is not None:
        return _LIB
    from fusedops.plugins import abi, native

    if native.library_path("fusedops") is None:
        require_native_build("the native core")
        native.build(cuda="auto", targets=["fusedops"])
    _LIB = abi.load()
    return _LIB


def f32(v: float) -> float:
    return float(np.float32(v))


def python_chain(data) -> tuple:
    """("ok", ((code, operand, a, b), ...)) with float32 parameters, or ("err", message) from the catalog."""
    try:
        steps = catalog.parse_chain(data)
    except catalog.CatalogError as e:
        return ("err", str(e))
    out = []
    for s in steps:
        if s.kind.binary:
            if isinstance(s.operand, int) and not isinstance(s.operand, bool):
                out.append((s.kind.code, s.operand, 0.0, 0.0))
            else:
                out.append((s.kind.code, -1, f32(s.operand), 0.0))
        else:
            p = list(s.params) + [0.0, 0.0]
            out.append((s.kind.code, -1, f32(p[0]), f32(p[1])))
    return ("ok", tuple(out))


def native_chain(lib, data: bytes) -> tuple:
    """The same result format from fusedops_parse_chain (bytes up to the first NUL, as a C string)."""
    from fusedops.plugins import abi

    ch, err = abi.Chain(), ctypes.create_string_buffer(ERR_BUF)
    rc = lib.fusedops_parse_chain(data, ctypes.byref(ch), err, ERR_BUF)
    if rc != 0:
        return ("err", err.value.decode())  # strict: a message must be valid UTF-8
    return ("ok", tuple((ch.steps[i].op, ch.steps[i].operand, ch.steps[i].a, ch.steps[i].b)
                        for i in range(ch.num_steps)))


def python_reduce(data) -> tuple:
    try:
        return ("ok", catalog.REDUCE_CODES[catalog.parse_reduce(data)])
    except catalog.CatalogError as e:
        return ("err", str(e))


def native_reduce(lib, data: bytes) -> tuple:
    out, err = ctypes.c_int32(-7), ctypes.create_string_buffer(ERR_BUF)
    rc = lib.fusedops_parse_reduce(data, ctypes.byref(out), err, ERR_BUF)
    return ("err", err.value.decode()) if rc != 0 else ("ok", out.value)


# ---------------------------------------------------------------------------------------------------------------------
# Hand-built ONNX models
# ---------------------------------------------------------------------------------------------------------------------

def vinfo(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, arr) -> TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def gn_model(C: int = 8, G: int = 4, opset: int = 21, attrs: dict | None = None, scale_len: int | None = None,
             bias_len: int | None = None, x_shape=None, raw_attrs: list | None = None) -> onnx.ModelProto:
    """Y = GroupNormalization(X) in the given opset (scale/bias per channel from 21, per group before)."""
    per = C if opset >= 21 else G
    scale = np.linspace(0.5, 1.5, scale_len if scale_len is not None else per)
    bias = np.linspace(-0.1, 0.1, bias_len if bias_len is not None else per)
    kw = {"num_groups": G, "epsilon": 1e-5} if attrs is None else attrs
    node = helper.make_node("GroupNormalization", ["X", "scale", "bias"], ["Y"], name="gn", **kw)
    for a in raw_attrs or []:
        node.attribute.append(a)
    shape = x_shape if x_shape is not None else ["N", C, 5]
    graph = helper.make_graph([node], "g", [vinfo("X", shape)], [vinfo("Y", shape)],
                              [init("scale", scale), init("bias", bias)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def fused_node_model(op: str = "GroupNormAct", C: int = 8, attrs: dict | None = None,
                     raw_attrs: list | None = None, x_shape=None, extras: int = 0, outputs=("Y",),
                     gamma_len: int | None = None, opset: int = 21) -> onnx.ModelProto:
    """One hand-written fusedops node (no function body: the fuser adds it); x_shape="unknown" declares X and Y
    without a shape."""
    kw = {"num_groups": 4} if attrs is None else attrs
    if op == "GroupNormAct":
        inputs = ["X", "gamma", "beta"]
        inits = [init("gamma", np.ones(gamma_len or C)), init("beta", np.zeros(C))]
        shape = x_shape if x_shape is not None else ["N", C, 3]
    else:
        inputs = ["X", "W", "B", "gamma", "beta"]
        inits = [init("W", np.full((C, 6), 0.1)), init("B", np.zeros(C)), init("gamma", np.ones(gamma_len or C)),
                 init("beta", np.zeros(C))]
        shape = x_shape if x_shape is not None else ["N", 6]
    for k in range(extras):
        inputs.append(f"e{k}")
        inits.append(init(f"e{k}", np.ones(C)))
    node = helper.make_node(op, inputs, list(outputs), domain="fusedops", name="fused", **kw)
    for a in raw_attrs or []:
        node.attribute.append(a)
    if shape == "unknown":  # X and Y declared without a shape
        x_info, out_infos = vinfo("X", None), [vinfo(o, None) for o in outputs]
    else:
        out_shape = [shape[0], C] + list(shape[2:]) if op == "GroupNormAct" else list(shape[:-1]) + [C]
        if kw.get("reduce"):
            out_shape[1 if op == "GroupNormAct" else -1] = 1
        x_info, out_infos = vinfo("X", shape), [vinfo(o, out_shape) for o in outputs]
    graph = helper.make_graph([node], "g", [x_info], out_infos, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("fusedops", 1)], ir_version=10)


def raw_attr(name: str, type_: int, **fields) -> onnx.AttributeProto:
    """An AttributeProto with any declared type and field values (to build ill-typed attributes)."""
    a = onnx.AttributeProto()
    a.name = name
    a.type = type_
    for k, v in fields.items():
        if isinstance(v, list):
            getattr(a, k).extend(v)
        else:
            setattr(a, k, v)
    return a


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


# ---------------------------------------------------------------------------------------------------------------------
# The CLI in a subprocess
# ---------------------------------------------------------------------------------------------------------------------

def run_cli(*args, cwd=None, timeout: float = 300, env_extra: dict | None = None, preexec_fn=None):
    """(returncode, stdout, stderr) of ``python -m fusedops ARGS``."""
    env = dict(os.environ)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-m", "fusedops", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env, preexec_fn=preexec_fn)
    return proc.returncode, proc.stdout, proc.stderr


def one_error_line(stderr: str) -> str:
    """The single ``fusedops: error: ...`` line of a failed command (asserts there is nothing else, e.g. no
    traceback) without the prefix."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one error line, got:\n{stderr}"
    assert lines[0].startswith("fusedops: error: "), lines[0]
    return lines[0][len("fusedops: error: "):]


def cli(capsys, *args) -> tuple[int, str, str]:
    """(exit code, stdout, the one error line or "") of ``fusedops ARGS`` run in this process. Anything but a
    FusedopsError escapes main() and fails the test with its traceback, which is the point."""
    from fusedops.cli import main

    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:  # argparse
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, (one_error_line(out.err) if rc == 2 else "")


# ---------------------------------------------------------------------------------------------------------------------
# Descriptors through the Python binding of the C ABI
# ---------------------------------------------------------------------------------------------------------------------

def groupnorm_desc(abi, a, N: int, C: int, S: int):
    d = abi.parse_attributes("GroupNormAct", a).d.gn
    d.N, d.C, d.S, d.x_dtype, d.param_dtype = N, C, S, abi.F32, abi.F32
    return d
