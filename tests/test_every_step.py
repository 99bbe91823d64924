"""Every chain step of the op spec on every runtime of this machine, against the hand-written float64 reference:
the CPU kernels (C ABI), the ONNX Runtime library, the function bodies on plain ONNX Runtime, the PyTorch ops on the
CPU, and each formula's ONNX expansion on its own. Parametrised over the spec, so a step added to ops.toml is tested
here with no edit. (softsign end to end, parsers and fuser included: tests/test_softsign.py; the CUDA kernels, the
PyTorch ops on CUDA and the ORT library on the CUDA EP: tests/gpu/test_every_step_gpu.py.)"""

from __future__ import annotations

import math
import zlib

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from fusedops import catalog
from fusedops.exporter import formula_onnx
from fusedops.exporter.functions import build_function

ort = pytest.importorskip("onnxruntime")
CPU = ["CPUExecutionProvider"]
TOL = 1e-4  # float32 kernels and bodies vs the float64 reference (GroupNorm amplifies by 1/std of the group)

# Every step alone: binary ones with a per-channel operand (@1, kept away from 0 for div / rdiv) and a scalar; unary
# ones with their defaults and other parameters.
PARAMS = {"leaky_relu": ["0.2"], "hardtanh": ["-0.5,inf"], "hardsigmoid": ["0.3,0.4"], "softplus": ["2,3"]}
CHAINS = []
for _name, _kind in catalog.STEP_KINDS.items():
    if _kind.binary:
        CHAINS += [f"{_name}(@1)", f"{_name}(1.5)"]
    else:
        CHAINS += [_name] + [f"{_name}({p})" for p in PARAMS.get(_name, [])]


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _inputs(op: str, chain: str, where: str) -> dict[str, np.ndarray]:
    rng = _rng(op, chain, where)
    if op == "GroupNormAct":
        C, t = 12, {"X": (rng.standard_normal((3, 12, 5, 7)) * 2 + 0.3).astype(np.float32)}
    else:
        C, K = 12, 16
        t = {"X": rng.standard_normal((2, 5, K)).astype(np.float32),
             "W": (rng.standard_normal((C, K)) / math.sqrt(K)).astype(np.float32),
             "B": rng.standard_normal(C).astype(np.float32)}
    t["gamma"] = (rng.random(C) + 0.5).astype(np.float32)
    t["beta"] = (rng.standard_normal(C) * 0.5).astype(np.float32)
    t["extra_0"] = rng.standard_normal(C).astype(np.float32)
    e1 = rng.standard_normal(C)
    t["extra_1"] = (np.sign(e1) * (np.abs(e1) + 1)).astype(np.float32)  # |e| >= 1: div(@1) stays well conditioned
    return t


def _reference(op: str, a: catalog.FusedAttrs, t: dict) -> np.ndarray:
    d = {k: torch.from_numpy(v).double() for k, v in t.items()}
    extras = [d["extra_0"], d["extra_1"]]
    if op == "GroupNormAct":
        return catalog.group_norm_act_reference(d["X"], d["gamma"], d["beta"], extras, a).numpy()
    return catalog.gemm_group_norm_act_reference(d["X"], d["W"], d["B"], d["gamma"], d["beta"], extras, a).numpy()


def _node_model(op: str, a: catalog.FusedAttrs, t: dict, with_function: bool) -> onnx.ModelProto:
    names = list(t)
    node = helper.make_node(op, names, ["Y"], domain=catalog.DOMAIN, **a.onnx_attrs(op))
    functions = []
    if with_function:
        fn = build_function(op, a, t["X"].ndim, 20, num_extras=2)
        node.overload = fn.overload
        functions = [fn]
    graph = helper.make_graph([node], "step", [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape)
                                               for n, v in t.items()],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, ir_version=10, functions=functions,
                             opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid(catalog.DOMAIN, 1)])


def _close(got, want, what: str) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=TOL, atol=TOL, err_msg=what)


@pytest.fixture(scope="module")
def fo_ort():
    from fusedops import ort as fo

    reason = fo.unavailable_reason()
    if reason:
        pytest.skip(f"the fusedops ONNX Runtime library is not usable here: {reason}")
    return fo


@pytest.fixture(scope="module")
def torch_ops():
    from fusedops.plugins import torch_ops as ops

    ops.load()
    return ops


@pytest.mark.parametrize("where", ["pre", "post"])
@pytest.mark.parametrize("op", ["GroupNormAct", "GemmGroupNormAct"])
@pytest.mark.parametrize("chain", CHAINS)
def test_step_on_every_cpu_runtime(chain, op, where, fo_ort, torch_ops):
    from fusedops.plugins import abi

    a = catalog.parse_attrs(op, {"num_groups": 4, where: chain})
    t = _inputs(op, chain, where)
    want = _reference(op, a, t)
    x = {k: torch.from_numpy(v) for k, v in t.items()}
    extras = [x["extra_0"], x["extra_1"]]
    label = f"{op} {where}={chain!r}"
    if op == "GroupNormAct":
        _close(abi.groupnorm_act_cpu(x["X"], x["gamma"], x["beta"], extras, a), want, f"CPU kernels, {label}")
        got = torch_ops.group_norm_act(x["X"], x["gamma"], x["beta"], extras, 4, 1e-5, a.onnx_attrs(op)["pre"],
                                       a.onnx_attrs(op)["post"], "")
    else:
        _close(abi.gemm_groupnorm_act_cpu(x["X"], x["W"], x["B"], x["gamma"], x["beta"], extras, a), want,
               f"CPU kernels, {label}")
        got = torch_ops.gemm_group_norm_act(x["X"], x["W"], x["B"], x["gamma"], x["beta"], extras, 4, 1e-5,
                                            a.onnx_attrs(op)["pre"], a.onnx_attrs(op)["post"], "", 1, 0)
    _close(got, want, f"PyTorch op (CPU), {label}")
    lib = fo_ort.session(_node_model(op, a, t, with_function=False), providers=CPU)
    _close(lib.run(None, t)[0], want, f"ONNX Runtime library, {label}")
    bodies = ort.InferenceSession(_node_model(op, a, t, with_function=True).SerializeToString(), providers=CPU)
    _close(bodies.run(None, t)[0], want, f"function body on ONNX Runtime, {label}")


@pytest.mark.parametrize("name", list(catalog.STEP_KINDS))
def test_formula_expansion_on_onnxruntime(name):
    """The ONNX form of each formula (generated bodies and formula patterns use it) alone on ORT, in float32, vs the
    float64 reference: including steps whose bodies are hand-written today, so any of them could switch over."""
    kind = catalog.STEP_KINDS[name]
    params = PARAMS.get(name, [None])[0]
    params = tuple(float(p) for p in params.split(",")) + kind.defaults[len(params.split(",")):] if params else \
        kind.defaults
    nodes: list = []

    def emit(op_type, inputs, **kw):
        out = f"t{len(nodes)}" if "out" not in kw else kw.pop("out")
        nodes.append(helper.make_node(op_type, inputs, [out], **kw))
        return out

    def num(v):
        return emit("Constant", [], value=onnx.numpy_helper.from_array(np.array(v, np.float32)))

    values = dict(zip(kind.param_names, params))
    y = formula_onnx.expand(kind.tree, num, lambda n: n if n in ("x", "v") else num(values[n]), emit, out="y")
    assert y == "y"
    x = np.concatenate([np.linspace(-30, 30, 601), _rng(name).standard_normal(400) * 3]).astype(np.float32)
    v = (np.sign(x) * (np.abs(x) + 1))[::-1].copy().astype(np.float32)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    feeds = {"x": x}
    if kind.binary:
        ins.append(helper.make_tensor_value_info("v", TensorProto.FLOAT, v.shape))
        feeds["v"] = v
    model = helper.make_model(helper.make_graph(nodes, name, ins, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, x.shape)]), opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    got = ort.InferenceSession(model.SerializeToString(), providers=CPU).run(None, feeds)[0]
    x64 = torch.from_numpy(x).double()
    want = (kind.fn(x64, torch.from_numpy(v).double()) if kind.binary else kind.fn(x64, *params)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
