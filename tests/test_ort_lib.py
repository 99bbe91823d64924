"""The ONNX Runtime custom-op library (libfusedops_ort.so) on the CPU EP.

- builds from a clean copy of the tracked sources (get_native_deps + CMake);
- hand-built fused graphs (onnx.helper: variadic extras, reductions, ranks, trans_b, float16/bfloat16 through Cast)
  match the catalog's float64 reference — these test the library in isolation from the exporter;
- each reference model, exported and fused, matches eager PyTorch and the run of its function bodies, and the
  kernel counter proves the library's kernel ran;
- bad input fails with an ORT error naming the node and the problem (at session creation where knowable).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from fusedops import catalog
from fusedops.errors import FusedopsError
from native_support import built_ort

ort = pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parent.parent
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def fo():
    return built_ort()


# ---------------------------------------------------------------------------------------------------------------------
# Hand-built fused graphs
# ---------------------------------------------------------------------------------------------------------------------

ONNX_TYPES = {torch.float32: TensorProto.FLOAT, torch.float16: TensorProto.FLOAT16,
              torch.bfloat16: TensorProto.BFLOAT16}


def _model(nodes, inputs, outputs, opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("fusedops", 1)])
    m.ir_version = 10  # every ORT from 1.21 reads IR 10
    return m


def fused_graph(op: str, attrs: dict, n_extras: int, x_dtype=torch.float32, p_dtype=None, node_name="fused0"):
    """float32 graph inputs, Cast to the kernel's types, the fused node, Cast back to float32."""
    p_dtype = p_dtype or x_dtype
    fixed = ["X", "W", "B", "gamma", "beta"] if op == "GemmGroupNormAct" else ["X", "gamma", "beta"]
    names = fixed + [f"extra_{k}" for k in range(n_extras)]
    nodes, node_inputs = [], []
    for n in names:
        to = x_dtype if n in ("X", "W") else p_dtype
        if to == torch.float32:
            node_inputs.append(n)
        else:
            nodes.append(helper.make_node("Cast", [n], [n + "_c"], to=ONNX_TYPES[to]))
            node_inputs.append(n + "_c")
    out = "Y" if x_dtype == torch.float32 else "Y_k"
    nodes.append(helper.make_node(op, node_inputs, [out], domain="fusedops", name=node_name, **attrs))
    if x_dtype != torch.float32:
        nodes.append(helper.make_node("Cast", [out], ["Y"], to=TensorProto.FLOAT))
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    return _model(nodes, ins, outs)


def _rand(gen, *shape, scale=1.0, shift=0.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift


GN_GRAPH_CASES = [
    ((2, 12, 5, 6), 4, "gelu", "", ""),
    ((3, 8, 7), 2, "add(@0);hardtanh(-1,1);mish", "leaky_relu(0.2);mul(@1)", ""),
    ((4, 6), 3, "", "relu", ""),
    ((2, 4, 3, 2, 5), 4, "", "silu", "logsumexp"),
    ((2, 12, 9, 4), 6, "", "", "min"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", GN_GRAPH_CASES, ids=lambda c: f"{c[0]}-{c[2] or '_'}-{c[3] or '_'}-{c[4] or '_'}")
def test_groupnorm_act_graph_matches_reference(fo, case, dtype):
    shape, G, pre, post, reduce = case
    attrs = {"num_groups": G, "epsilon": 1e-5, "pre": pre, "post": post, "reduce": reduce}
    a = catalog.parse_attrs("GroupNormAct", attrs)
    C = shape[1]
    gen = torch.Generator().manual_seed(len(shape) * 100 + G)
    x, gamma, beta = _rand(gen, *shape, scale=2, shift=0.3), _rand(gen, C, shift=1), _rand(gen, C)
    extras = [_rand(gen, C).abs() + 0.5 for _ in range(a.num_extras)]
    # The inputs as the kernel sees them (rounded to its dtype), then the float64 reference.
    r = [t.to(dtype).double() for t in [x, gamma, beta, *extras]]
    ref = catalog.group_norm_act_reference(r[0], r[1], r[2], r[3:], a).to(dtype).double().numpy()
    sess = fo.session(fused_graph("GroupNormAct", attrs, a.num_extras, dtype), providers=CPU)
    feeds = {"X": x, "gamma": gamma, "beta": beta, **{f"extra_{k}": e for k, e in enumerate(extras)}}
    before = fo.kernel_calls("cpu")
    (y,) = fo.run(sess, {k: v.float().numpy() for k, v in feeds.items()})
    assert fo.kernel_calls("cpu") == before + 1
    assert y.shape == ref.shape
    tol = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}[dtype]
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol)


GEMM_GRAPH_CASES = [
    ((12, 96), 160, 10, "", "leaky_relu;mul(2)", "", 1),
    ((12, 96), 160, 10, "", "", "min", 1),
    ((12, 96), 160, 5, "add(@0);hardtanh;mish", "", "", 1),
    ((2, 3, 20), 16, 4, "", "gelu", "", 0),  # rank-3 X: a batch of rows; W as (K, C)
    ((1, 40), 24, 3, "relu", "sub(@0)", "sum", 1),
]


@pytest.mark.parametrize("dtype,p_dtype", [(torch.float32, None), (torch.float16, None), (torch.bfloat16, None),
                                           (torch.float16, torch.float32)])
@pytest.mark.parametrize("case", GEMM_GRAPH_CASES, ids=lambda c: f"{c[0]}-C{c[1]}-{c[5] or '_'}-tb{c[6]}")
def test_gemm_groupnorm_act_graph_matches_reference(fo, case, dtype, p_dtype):
    xshape, C, G, pre, post, reduce, trans_b = case
    attrs = {"num_groups": G, "epsilon": 1e-5, "pre": pre, "post": post, "reduce": reduce, "trans_b": trans_b,
             "allow_tf32": 1}
    a = catalog.parse_attrs("GemmGroupNormAct", attrs)
    K = xshape[-1]
    gen = torch.Generator().manual_seed(C + K)
    x = torch.rand(*xshape, generator=gen, dtype=torch.float64)
    w = _rand(gen, *((C, K) if trans_b else (K, C))) / K ** 0.5
    b, gamma, beta = _rand(gen, C), _rand(gen, C, shift=1), _rand(gen, C)
    extras = [_rand(gen, C).abs() + 0.5 for _ in range(a.num_extras)]
    pd = p_dtype or dtype
    r = [x.to(dtype).double(), w.to(dtype).double()] + [t.to(pd).double() for t in [b, gamma, beta, *extras]]
    ref = catalog.gemm_group_norm_act_reference(r[0], r[1], r[2], r[3], r[4], r[5:], a).to(dtype).double().numpy()
    sess = fo.session(fused_graph("GemmGroupNormAct", attrs, a.num_extras, dtype, p_dtype), providers=CPU)
    feeds = {"X": x, "W": w, "B": b, "gamma": gamma, "beta": beta,
             **{f"extra_{k}": e for k, e in enumerate(extras)}}
    before = fo.kernel_calls("cpu")
    (y,) = fo.run(sess, {k: v.float().numpy() for k, v in feeds.items()})
    assert fo.kernel_calls("cpu") == before + 1
    assert y.shape == ref.shape
    tol = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}[dtype]
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol)


def test_attribute_defaults_applied_in_cpp(fo):
    """Only num_groups on the node: epsilon 1e-5, empty chains, no reduce, trans_b 1 come from the C++ defaults."""
    gen = torch.Generator().manual_seed(3)
    m = fused_graph("GemmGroupNormAct", {"num_groups": 2}, 0)
    x, w, b = torch.rand(3, 8, generator=gen), torch.randn(6, 8, generator=gen), torch.randn(6, generator=gen)
    g, bt = torch.rand(6, generator=gen) + 0.5, torch.randn(6, generator=gen)
    ref = catalog.gemm_group_norm_act_reference(*(t.double() for t in (x, w, b, g, bt)), [],
                                                catalog.parse_attrs("GemmGroupNormAct", {"num_groups": 2}))
    (y,) = fo.run(fo.session(m, providers=CPU), {"X": x, "W": w, "B": b, "gamma": g, "beta": bt})
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# Reference models: exported + fused, with the library, vs eager PyTorch and vs the function bodies
# ---------------------------------------------------------------------------------------------------------------------

def _fused_model(name: str):
    try:
        from fusedops import exporter_api
    except ImportError as e:
        pytest.skip(f"exporter not available: {e}")
    return exporter_api.export_fused_model(name, "small")


@pytest.mark.parametrize("name", ["matmul_groupnorm_leakyrelu_sum", "gemm_groupnorm_min_biasadd",
                                  "gemm_biasadd_hardtanh_mish_groupnorm", "convtranspose2d_gelu_groupnorm"])
def test_reference_model_fused_on_cpu_ep(fo, name):
    from fusedops.models.registry import get_entry

    entry = get_entry(name)
    model = _fused_model(name)
    fused = [n for n in model.graph.node if n.domain == "fusedops"]
    assert fused, f"{name}: the fuser emitted no fusedops node"
    sess = fo.session(model, providers=CPU)
    plain = ort.InferenceSession(model.SerializeToString(), providers=CPU)  # no library: the function bodies
    module = entry.build("small")
    in_name = sess.get_inputs()[0].name
    for batch in (None, 1, 5):  # the export has a dynamic batch dimension
        if name == "gemm_groupnorm_min_biasadd" and batch is not None:
            continue  # its output broadcasts the batch into dim 2; covered at the export batch
        gen = torch.Generator().manual_seed(11 + (batch or 0))
        (x,) = entry.inputs("small", batch=batch, generator=gen)
        with torch.no_grad():
            want = module(x).numpy()
        before = fo.kernel_calls("cpu")
        (y,) = fo.run(sess, {in_name: x})
        assert fo.kernel_calls("cpu") - before == len(fused), "the library's kernel did not run"
        (y_fn,) = plain.run(None, {in_name: x.numpy()})
        assert y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(y, y_fn, rtol=1e-5, atol=1e-5)


def test_profiling_shows_one_node_per_fused_op(fo, tmp_path):
    import json

    model = _fused_model("matmul_groupnorm_leakyrelu_sum")
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = fo.session(model, providers=CPU, sess_options=so)
    (x,) = __import__("fusedops.models.registry", fromlist=["get_entry"]).get_entry(1).inputs("small")
    fo.run(sess, {sess.get_inputs()[0].name: x})
    events = json.loads(Path(sess.end_profiling()).read_text())
    ops = [e["args"].get("op_name") for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    assert ops == ["GemmGroupNormAct"], ops


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: an ORT error naming the node and the problem, never a crash
# ---------------------------------------------------------------------------------------------------------------------

def _session_error(fo, model, **kw) -> str:
    with pytest.raises(FusedopsError) as ei:
        fo.session(model, providers=CPU, **kw)
    return str(ei.value)


@pytest.mark.parametrize("attrs,needle", [
    ({"num_groups": 2, "pre": "hardtanh(1x)"}, "attribute 'pre': malformed number '1x' in step 'hardtanh'"),
    ({"num_groups": 2, "post": "relu;frob"}, "attribute 'post': unknown chain step 'frob'"),
    ({"num_groups": 2, "reduce": "median"}, "attribute 'reduce': unknown reduce 'median'"),
    ({"num_groups": 0}, "num_groups must be positive"),
    ({"epsilon": 1e-5}, "attribute 'num_groups' is required"),
    ({"num_groups": 2, "epsilon": -1.0}, "epsilon must be a finite non-negative number"),
    ({"num_groups": 2, "pre": "add(@1)"}, "chains reference 2 extra input(s) (@0..@1), got 0"),
    ({"num_groups": 2, "plugin_namespace": "other"}, "plugin_namespace"),
])
def test_bad_attributes_fail_at_session_creation(fo, attrs, needle):
    msg = _session_error(fo, fused_graph("GroupNormAct", attrs, 0, node_name="my_gn_node"))
    assert "my_gn_node" in msg and needle in msg, msg


def test_bad_gemm_attributes(fo):
    msg = _session_error(fo, fused_graph("GemmGroupNormAct", {"num_groups": 2, "trans_b": 3}, 0, node_name="gg"))
    assert "gg" in msg and "trans_b must be 0 or 1" in msg


# onnx.helper picks the attribute type from the Python value: int -> INT, float -> FLOAT, str -> STRING, lists -> INTS
# / FLOATS / STRINGS. Every catalog attribute, given with a wrong type, must fail rather than fall back to its default.
@pytest.mark.parametrize("op,attrs,needle", [
    ("GroupNormAct", {"num_groups": "2"}, "attribute 'num_groups' must be INT, got STRING"),
    ("GroupNormAct", {"num_groups": 2.0}, "attribute 'num_groups' must be INT, got FLOAT"),
    ("GroupNormAct", {"num_groups": 2, "epsilon": 1}, "attribute 'epsilon' must be FLOAT, got INT"),
    ("GroupNormAct", {"num_groups": 2, "epsilon": "1e-5"}, "attribute 'epsilon' must be FLOAT, got STRING"),
    ("GroupNormAct", {"num_groups": 2, "pre": 1.5}, "attribute 'pre' must be STRING, got FLOAT"),
    ("GroupNormAct", {"num_groups": 2, "post": [1, 2]}, "attribute 'post' must be STRING, got INTS"),
    ("GroupNormAct", {"num_groups": 2, "reduce": [1.0]}, "attribute 'reduce' must be STRING, got FLOATS"),
    ("GroupNormAct", {"num_groups": 2, "pre": ["relu", "gelu"]},
     "attribute 'pre' must be STRING, got a list or another non-scalar type"),
    ("GroupNormAct", {"num_groups": 2, "plugin_namespace": 7}, "attribute 'plugin_namespace' must be STRING, got INT"),
    ("GroupNormAct", {"num_groups": 2, "plugin_version": 1}, "attribute 'plugin_version' must be STRING, got INT"),
    ("GemmGroupNormAct", {"num_groups": 2, "trans_b": 1.0}, "attribute 'trans_b' must be INT, got FLOAT"),
    ("GemmGroupNormAct", {"num_groups": 2, "allow_tf32": "0"}, "attribute 'allow_tf32' must be INT, got STRING"),
])
def test_wrong_attribute_type_fails_at_session_creation(fo, op, attrs, needle):
    msg = _session_error(fo, fused_graph(op, attrs, 0, node_name="typed_node"))
    assert f"fusedops {op} node 'typed_node': {needle}" in msg, msg


def test_unregistered_dtype_is_an_error_naming_the_node(fo):
    x = helper.make_tensor_value_info("X", TensorProto.DOUBLE, [2, 4, 3])
    g = helper.make_tensor_value_info("gamma", TensorProto.DOUBLE, [4])
    b = helper.make_tensor_value_info("beta", TensorProto.DOUBLE, [4])
    y = helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)
    node = helper.make_node("GroupNormAct", ["X", "gamma", "beta"], ["Y"], domain="fusedops", name="dbl_node",
                            num_groups=2)
    msg = _session_error(fo, _model([node], [x, g, b], [y]))
    # ORT rejects the type while checking the graph, before any kernel exists; its message names node and type.
    assert "dbl_node" in msg and "tensor(double)" in msg, msg


def _static_graph(op: str, shapes: dict, attrs: dict, node_name: str):
    """float32 graph whose inputs carry the given shapes (None: unknown shape; str / None dims: symbolic / unknown)."""
    names = list(shapes)
    node = helper.make_node(op, names, ["Y"], domain="fusedops", name=node_name, **attrs)
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in names]
    return _model([node], ins, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])


def _creation_error(fo, model) -> str:
    """The error of creating the session; the model is never run, so the check cannot have happened at run."""
    so = ort.SessionOptions()
    so.register_custom_ops_library(str(fo.library_path()))
    with pytest.raises(Exception) as ei:
        ort.InferenceSession(model.SerializeToString(), so, providers=CPU)
    return str(ei.value)


_GN = {"X": [2, 6, 4], "gamma": [6], "beta": [6]}
_GEMM = {"X": [3, 5], "W": [4, 5], "B": [4], "gamma": [4], "beta": [4]}


@pytest.mark.parametrize("op,shapes,attrs,needle", [
    ("GroupNormAct", {**_GN, "gamma": [5]}, {}, "gamma has 5 elements, expected C=6"),
    ("GroupNormAct", {**_GN, "beta": [2, 4]}, {}, "beta has 8 elements, expected C=6"),
    ("GroupNormAct", {**_GN, "extra_0": [3]}, {"pre": "add(@0)"},
     "extra input 0 has 3 elements, expected C=6 (one per channel)"),
    ("GroupNormAct", {**_GN, "X": ["N", 8, 4], "gamma": [8], "beta": [8]}, {"num_groups": 3},
     "C=8 is not divisible by num_groups=3"),
    ("GroupNormAct", {**_GN, "X": [6]}, {}, "X must have rank 2-5 (N, C, *spatial), got shape (6,)"),
    ("GemmGroupNormAct", {**_GEMM, "W": [4, 6]}, {},
     "X has K=5 features but W of shape (4, 6) (trans_b=1) expects 6"),
    ("GemmGroupNormAct", {**_GEMM, "W": [5, 3]}, {"trans_b": 0}, "bias B has 4 elements, expected C=3"),
    ("GemmGroupNormAct", {**_GEMM, "W": [6, 5], "B": [6], "beta": [6]}, {}, "gamma has 4 elements, expected C=6"),
    ("GemmGroupNormAct", {**_GEMM, "W": [6, 5], "B": [6], "gamma": [6], "beta": [6]}, {"num_groups": 4},
     "C=6 is not divisible by num_groups=4"),
    ("GemmGroupNormAct", {**_GEMM, "W": [4, 5, 1]}, {}, "W must be 2-D, got shape (4, 5, 1)"),
    ("GemmGroupNormAct", {**_GEMM, "X": [5]}, {}, "X must have rank >= 2 (rows, K), got shape (5,)"),
])
def test_static_shape_errors_fail_at_session_creation(fo, op, shapes, attrs, needle):
    msg = _creation_error(fo, _static_graph(op, shapes, {"num_groups": 2, **attrs}, "static_node"))
    # ORT prefixes its own text; ours starts with the op and node, then the problem.
    assert f"fusedops {op} node 'static_node': {needle}" in msg, msg


def test_dynamic_dims_are_checked_at_run(fo):
    """Unknown / symbolic dims skip the creation-time checks: the problem then fails at run; valid feeds run."""
    m = _static_graph("GroupNormAct", {"X": ["N", "C", None], "gamma": [5], "beta": [6]}, {"num_groups": 2}, "dyn")
    sess = fo.session(m, providers=CPU)
    x = np.random.rand(2, 6, 3).astype(np.float32)
    with pytest.raises(Exception, match="fusedops GroupNormAct node 'dyn': gamma has 5 elements, expected C=6"):
        sess.run(None, {"X": x, "gamma": np.ones(5, np.float32), "beta": np.zeros(6, np.float32)})
    # Symbolic batch and rows, static C and K: valid, so the session is created and runs at several batch sizes.
    m = _static_graph("GemmGroupNormAct", {**_GEMM, "X": ["batch", None, 5], "W": [5, 4]}, {"num_groups": 2,
                                                                                           "trans_b": 0}, "dyn2")
    sess = fo.session(m, providers=CPU)
    p = {"W": np.random.rand(5, 4).astype(np.float32), "B": np.zeros(4, np.float32),
         "gamma": np.ones(4, np.float32), "beta": np.zeros(4, np.float32)}
    for shape in [(1, 2, 5), (3, 7, 5)]:
        (y,) = sess.run(None, {"X": np.random.rand(*shape).astype(np.float32), **p})
        assert y.shape == shape[:-1] + (4,)


def _run_error(fo, model, feeds) -> str:
    sess = fo.session(model, providers=CPU)
    with pytest.raises(Exception) as ei:
        fo.run(sess, feeds)
    return str(ei.value)


def test_run_time_shape_errors_name_node_and_problem(fo):
    m = fused_graph("GroupNormAct", {"num_groups": 3, "pre": "add(@0)"}, 1, node_name="gn_run")
    x = np.random.rand(2, 6, 4).astype(np.float32)
    ok = {"X": x, "gamma": np.ones(6, np.float32), "beta": np.zeros(6, np.float32),
          "extra_0": np.ones(6, np.float32)}
    fo.run(fo.session(m, providers=CPU), ok)  # sanity: the valid feed runs
    msg = _run_error(fo, m, {**ok, "gamma": np.ones(5, np.float32)})
    assert "gn_run" in msg and "gamma has 5 elements, expected C=6" in msg, msg
    msg = _run_error(fo, m, {**ok, "beta": np.ones(7, np.float32)})
    assert "gn_run" in msg and "beta has 7 elements" in msg, msg
    msg = _run_error(fo, m, {**ok, "extra_0": np.ones(3, np.float32)})
    assert "gn_run" in msg and "extra input 0 has 3 elements" in msg, msg
    x8 = np.random.rand(2, 8, 4).astype(np.float32)
    msg = _run_error(fo, m, {"X": x8, "gamma": np.ones(8, np.float32), "beta": np.zeros(8, np.float32),
                             "extra_0": np.ones(8, np.float32)})
    assert "gn_run" in msg and "C=8 is not divisible by num_groups=3" in msg, msg
    msg = _run_error(fo, m, {**ok, "X": np.random.rand(6).astype(np.float32)})
    assert "gn_run" in msg and "rank 2-5" in msg, msg


def test_gemm_run_time_errors(fo):
    m = fused_graph("GemmGroupNormAct", {"num_groups": 2}, 0, node_name="gemm_run")
    ok = {"X": np.random.rand(3, 5).astype(np.float32), "W": np.random.rand(4, 5).astype(np.float32),
          "B": np.zeros(4, np.float32), "gamma": np.ones(4, np.float32), "beta": np.zeros(4, np.float32)}
    fo.run(fo.session(m, providers=CPU), ok)
    msg = _run_error(fo, m, {**ok, "W": np.random.rand(4, 6).astype(np.float32)})
    assert "gemm_run" in msg and "K=5" in msg and "expects 6" in msg, msg
    msg = _run_error(fo, m, {**ok, "B": np.zeros(3, np.float32)})
    assert "gemm_run" in msg and "bias B has 3 elements" in msg, msg


def test_empty_batch_gives_empty_output(fo):
    m = fused_graph("GroupNormAct", {"num_groups": 2}, 0)
    (y,) = fo.run(fo.session(m, providers=CPU), {"X": np.zeros((0, 4, 3), np.float32),
                                                  "gamma": np.ones(4, np.float32), "beta": np.zeros(4, np.float32)})
    assert y.shape == (0, 4, 3)


def test_bad_session_config_value(fo):
    so = ort.SessionOptions()
    so.add_session_config_entry("fusedops.allow_tf32", "maybe")
    with pytest.raises(Exception, match="fusedops.allow_tf32 must be '0' or '1'"):
        so.register_custom_ops_library(str(fo.library_path()))


def test_library_registers_once_per_options_and_many_sessions(fo):
    m = fused_graph("GroupNormAct", {"num_groups": 2, "post": "relu"}, 0)
    feeds = {"X": np.random.rand(2, 4, 3).astype(np.float32), "gamma": np.ones(4, np.float32),
             "beta": np.zeros(4, np.float32)}
    so = ort.SessionOptions()
    outs = [fo.run(fo.session(m, providers=CPU, sess_options=so), feeds)[0] for _ in range(3)]
    outs += [fo.run(fo.session(m, providers=CPU), feeds)[0] for _ in range(3)]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_missing_library_is_a_clear_error(monkeypatch, tmp_path):
    from fusedops import ort as fo_mod

    monkeypatch.setenv("FUSEDOPS_BUILD_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FusedopsError, match="libfusedops_ort.so not found"):
        fo_mod.library_path()


# ---------------------------------------------------------------------------------------------------------------------
# Clean build from the tracked sources only
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_library_builds_from_clean_copy(fo, tmp_path):
    """A copy of the committed plugins/ + scripts/ (no build folder, no third_party) configures and builds."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot list the tracked files")
    files = subprocess.run(["git", "ls-files", "plugins", "scripts"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           check=True).stdout.split()
    if "scripts/get_native_deps.sh" not in files or "plugins/ort/CMakeLists.txt" not in files:
        pytest.skip("git's index here does not list the committed native sources (a copied tree, not a clone)")
    src = tmp_path / "src"
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    env = dict(os.environ)
    # Offline-friendly: reuse the headers already fetched (the script honours these and skips the download).
    env.setdefault("EIGEN_INCLUDE_DIR", str(ROOT / "third_party" / "eigen3"))
    env.setdefault("ORT_INCLUDE_DIR", str(ROOT / "third_party" / "onnxruntime" / "include"))
    subprocess.run(["bash", str(src / "scripts" / "get_native_deps.sh")], env=env, check=True,
                   stdout=subprocess.PIPE)
    build = tmp_path / "build"
    cfg = subprocess.run(["cmake", "-S", str(src / "plugins"), "-B", str(build), "-DFUSEDOPS_CUDA=OFF",
                          f"-DEIGEN_INCLUDE_DIR={env['EIGEN_INCLUDE_DIR']}",
                          f"-DORT_INCLUDE_DIR={env['ORT_INCLUDE_DIR']}"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert cfg.returncode == 0, cfg.stdout[-3000:]
    bld = subprocess.run(["cmake", "--build", str(build), "--target", "fusedops_ort", "-j", str(os.cpu_count() or 2)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert bld.returncode == 0, bld.stdout[-3000:]
    lib = build / "lib" / "libfusedops_ort.so"
    assert lib.is_file()
    so = ort.SessionOptions()
    so.register_custom_ops_library(str(lib))
    sess = ort.InferenceSession(fused_graph("GroupNormAct", {"num_groups": 2}, 0).SerializeToString(), so,
                                providers=CPU)
    x = np.random.rand(2, 4, 3).astype(np.float32)
    (y,) = sess.run(None, {"X": x, "gamma": np.ones(4, np.float32), "beta": np.zeros(4, np.float32)})
    ref = torch.nn.functional.group_norm(torch.from_numpy(x), 2).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_precision_cannot_change_on_registered_options(fo):
    so = ort.SessionOptions()
    m = fused_graph("GroupNormAct", {"num_groups": 2}, 0)
    fo.session(m, providers=CPU, sess_options=so, allow_tf32=False)
    assert so.get_session_config_entry("fusedops.allow_tf32") == "0"
    with pytest.raises(FusedopsError, match="use a new SessionOptions"):
        fo.session(m, providers=CPU, sess_options=so, allow_tf32=True)
    so2 = ort.SessionOptions()
    fo.session(m, providers=CPU, sess_options=so2)  # default: the nodes' allow_tf32 attributes decide
    with pytest.raises(Exception):
        so2.get_session_config_entry("fusedops.allow_tf32")


def test_unavailable_reason(fo, monkeypatch, tmp_path):
    assert fo.unavailable_reason("CPUExecutionProvider") is None
    if not fo.library_has_cuda():
        assert "without CUDA" in fo.unavailable_reason("CUDAExecutionProvider")
    monkeypatch.setenv("FUSEDOPS_BUILD_DIR", str(tmp_path / "nowhere"))
    assert "not found" in fo.unavailable_reason("CPUExecutionProvider")


def test_ort_bench_cpu_rows_small(fo):
    from fusedops.benchmark import ort_rows as ort_bench

    before = fo.kernel_calls("cpu")
    rows = ort_bench.cpu_rows("1", "small", warmup=1, iters=3)
    assert {r["backend"] for r in rows} == {"ort-cpu-unfused", "ort-cpu-fused"}
    assert all(r["median_ms"] > 0 and r["runs"] == 3 and r["max_abs_diff"] < 1e-5 for r in rows)
    # The fused row ran the library (model 1 has one fused node): 1 accuracy run + 1 warm-up + 3 timed runs.
    assert fo.kernel_calls("cpu") - before == 5
