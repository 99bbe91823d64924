"""ConvTransposeGroupNormAct in the ONNX Runtime custom-op library (libfusedops_ort.so) on the CPU EP (issue 13).

- hand-built one-node models (the node and function body the exporter writes) run with the library: against the
  float64 reference and against the same model run without the library (its function body); the CPU kernel counter
  proves the library's kernel ran, not the body;
- ONNX ConvTranspose's INTS attributes: given, absent (ONNX's defaults), wrong length / type / value, group;
- the fuser's output for a model-4-like module (``fuse_model(..., convtranspose=True)``) against eager PyTorch;
- bad attributes and shapes fail with an ORT error naming the node and the problem.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from fusedops import catalog
from fusedops.errors import FusedopsError
from native_support import built_ort

ort = pytest.importorskip("onnxruntime")
CPU = ["CPUExecutionProvider"]
OP = catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name
NP_TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
# float32: the CPU kernel against float64 is ~1e-6 on outputs up to |y| ~ 10 (tests/test_convt_cpu.py allows 1e-4);
# 1e-4 is far below what a wrong pad, crop, group or missing bias gives (errors of order 0.1-1).
TOL = 1e-4

CASES = {
    "stride1_model4_like": dict(x=(2, 8, 6, 6), w=(8, 8, 3, 3), G=4, pre="gelu"),
    "stride2_pads_outpad": dict(x=(2, 6, 5, 7), w=(6, 4, 3, 3), G=2, strides=[2, 2], pads=[1, 0, 2, 1],
                                output_padding=[1, 1], pre="gelu"),
    "dilation2": dict(x=(2, 6, 6, 5), w=(6, 10, 3, 3), G=5, dilations=[2, 2], pads=[2, 1, 2, 1], pre="silu"),
    "groups2": dict(x=(2, 6, 5, 4), w=(6, 5, 3, 3), G=5, group=2, strides=[2, 1], pre="gelu"),
    "one_d": dict(x=(3, 4, 11), w=(4, 6, 5), G=3, strides=[2], pads=[2, 1], output_padding=[1], pre="silu",
                  reduce="max"),
    "no_bias": dict(x=(2, 4, 6, 6), w=(4, 4, 2, 2), G=2, strides=[2, 2], bias=False, pre="relu"),
    "post_chain_extras": dict(x=(2, 8, 5, 5), w=(8, 8, 3, 3), G=4, pre="add(@0);gelu", post="mul(@1);relu"),
}


@pytest.fixture(scope="module")
def fo():
    return built_ort()


def _case(x, w, G, bias=True, seed=0, x_dtype=np.float32, p_dtype=np.float32, **attrs):
    rng = np.random.default_rng(seed)
    a = catalog.parse_attrs(OP, {"num_groups": G, **attrs})
    c = w[1] * a.conv.group
    t = {"X": (rng.standard_normal(x) * 1.5 + 0.2).astype(x_dtype),
         "W": (rng.standard_normal(w) / np.sqrt(w[0] * np.prod(w[2:]))).astype(x_dtype),
         "B": (rng.standard_normal(c) * 0.3).astype(p_dtype) if bias else None,
         "gamma": rng.uniform(0.5, 1.5, c).astype(p_dtype), "beta": rng.standard_normal(c).astype(p_dtype)}
    t.update({f"extra_{k}": rng.standard_normal(c).astype(p_dtype) for k in range(a.num_extras)})
    return a, t


def _node_model(a: catalog.FusedAttrs, t: dict, node_attrs: dict | None = None, name: str = "convt0",
                static: bool = True) -> onnx.ModelProto:
    """One ConvTransposeGroupNormAct node (absent B: an empty input name) with the exporter's function body."""
    from fusedops.exporter.functions import build_function

    attrs = a.onnx_attrs(OP) if node_attrs is None else node_attrs
    node = helper.make_node(OP, [n if v is not None else "" for n, v in t.items()], ["Y"], domain=catalog.DOMAIN,
                            name=name, **attrs)
    fn = build_function(OP, a, t["X"].ndim, 18, num_extras=a.num_extras)
    node.overload = fn.overload
    ins = [helper.make_tensor_value_info(n, NP_TYPES[v.dtype.type], v.shape if static else None)
           for n, v in t.items() if v is not None]
    out = helper.make_tensor_value_info("Y", NP_TYPES[t["X"].dtype.type], None)
    return helper.make_model(helper.make_graph([node], "convt", ins, [out]), ir_version=10, functions=[fn],
                             opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid(catalog.DOMAIN, catalog.VERSION)])


def _feeds(t: dict) -> dict:
    return {k: v for k, v in t.items() if v is not None}


def _reference(a: catalog.FusedAttrs, t: dict) -> np.ndarray:
    d = {k: None if v is None else torch.from_numpy(v.astype(np.float64)) for k, v in t.items()}
    extras = [d[f"extra_{k}"] for k in range(a.num_extras)]
    return catalog.convtranspose_group_norm_act_reference(d["X"], d["W"], d["B"], d["gamma"], d["beta"], extras,
                                                          a).numpy()


def _run_library(fo, model, feeds, runs: int = 1):
    """Y from a session with the library; asserts its CPU kernel ran once per run (not the function body)."""
    sess = fo.session(model, providers=CPU)
    before = fo.kernel_calls("cpu")
    ys = [sess.run(None, feeds)[0] for _ in range(runs)]
    assert fo.kernel_calls("cpu") - before == runs, "the library's kernel did not run"
    return ys[-1]


def _run_body(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=CPU).run(None, feeds)[0]


def test_the_spec_lists_the_op_for_the_ort_adapter():
    assert OP in catalog.ops_registered_by("ort")


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_matches_float64_and_the_function_body(fo, name):
    a, t = _case(**CASES[name])
    model = _node_model(a, t)
    got = _run_library(fo, model, _feeds(t))
    want = _reference(a, t)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL, atol=TOL, err_msg=name)
    np.testing.assert_allclose(got, _run_body(model, _feeds(t)), rtol=TOL, atol=TOL, err_msg=name)


def test_absent_lists_take_onnx_defaults(fo):
    """No kernel_shape / strides / pads / output_padding / dilations / group on the node: stride 1, no pads, the
    kernel from W, one group (a wrong default would change the output's size or values)."""
    a, t = _case(x=(2, 4, 5, 6), w=(4, 6, 3, 2), G=3, pre="gelu")
    lists = {"kernel_shape", "strides", "pads", "output_padding", "dilations", "group"}
    model = _node_model(a, t, node_attrs={k: v for k, v in a.onnx_attrs(OP).items() if k not in lists})
    got = _run_library(fo, model, _feeds(t))
    want = _reference(a, t)
    assert got.shape == want.shape == (2, 6, 7, 7)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL, atol=TOL)


def test_dynamic_shapes_get_a_plan_each(fo):
    """Graph inputs without shapes: the plan is made per run shape; two batch sizes alternate on one session."""
    a, t = _case(**CASES["stride2_pads_outpad"])
    _, t3 = _case(**{**CASES["stride2_pads_outpad"], "x": (3, 6, 4, 7)}, seed=1)
    sess = fo.session(_node_model(a, t, static=False), providers=CPU)
    before = fo.kernel_calls("cpu")
    for tt in (t, t3, t):
        got = sess.run(None, _feeds(tt))[0]
        np.testing.assert_allclose(got.astype(np.float64), _reference(a, tt), rtol=TOL, atol=TOL)
    assert fo.kernel_calls("cpu") - before == 3


# float16 parameters only without B: the function body passes B to ConvTranspose as it is, so it must be float32
# there (exporter/functions.py), and ORT checks the body's types even when the library's kernel runs the node.
@pytest.mark.parametrize("p_dtype,bias", [(np.float32, True), (np.float16, False)])
def test_float16_x(fo, p_dtype, bias):
    # float16 X / W, float32 accumulation; tests/test_convt_cpu.py's tolerance for float16.
    a, t = _case(**CASES["stride2_pads_outpad"], x_dtype=np.float16, p_dtype=p_dtype, bias=bias)
    model = _node_model(a, t)
    got = _run_library(fo, model, _feeds(t))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), _reference(a, t), rtol=8e-3, atol=8e-3)
    np.testing.assert_allclose(got.astype(np.float32), _run_body(model, _feeds(t)).astype(np.float32), rtol=8e-3,
                               atol=8e-3)


def test_fused_model4_like_module_against_eager(fo):
    from fusedops.exporter import export_module, fuse_model
    from fusedops.models import convtranspose2d_gelu_groupnorm as model4

    torch.manual_seed(0)
    m = model4.Model(8, 8, 3, 2, 4, 4).eval()  # stride 2
    with torch.no_grad():  # non-trivial affine parameters, so gamma / beta wiring is checked
        m.group_norm.weight.uniform_(0.5, 1.5)
        m.group_norm.bias.uniform_(-0.5, 0.5)
    x = torch.rand(2, 8, 7, 7)
    fused = fuse_model(export_module(m, x), convtranspose=True)
    assert [n.op_type for n in fused.graph.node if n.domain == catalog.DOMAIN] == [OP]
    in_name = fused.graph.input[0].name
    got = _run_library(fo, fused, {in_name: x.numpy()}, runs=2)
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got, _run_body(fused, {in_name: x.numpy()}), rtol=TOL, atol=TOL)


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: an ORT error naming the node and the problem, at session creation where the graph shows it
# ---------------------------------------------------------------------------------------------------------------------

def _creation_error(fo, model) -> str:
    with pytest.raises(FusedopsError) as ei:
        fo.session(model, providers=CPU)
    return str(ei.value)


@pytest.mark.parametrize("change,needle", [
    ({"strides": [2, 2, 2]}, "attribute 'strides' has 3 values; expected 1 per spatial dim"),
    ({"pads": [1, 1, 1]}, "attribute 'pads' has 3 values; expected 2 per spatial dim"),
    ({"strides": [1]}, "the convolution attributes are for 1 spatial dims but X"),
    ({"dilations": [1, 0]}, "attribute 'dilations' value 0 (index 1) must be in [1, 2147483647]"),
    ({"group": 0}, "attribute 'group' must be in [1, 2147483647], got 0"),
    ({"group": -2}, "attribute 'group' must be in [1, 2147483647], got -2"),
    ({"output_padding": [2, 0]}, "attribute 'output_padding' 2 (spatial dim 0) must be below max(stride 1"),
    ({"strides": 2}, "attribute 'strides' must be INTS, got INT"),
    ({"pads": [1.0, 1.0, 1.0, 1.0]}, "attribute 'pads' must be INTS, got FLOATS"),
    ({"kernel_shape": "3,3"}, "attribute 'kernel_shape' must be INTS, got STRING"),
    ({"group": [2]}, "attribute 'group' must be INT, got INTS"),
    ({"kernel_shape": [2, 2]}, "attribute 'kernel_shape' is 2 for spatial dim 0 but W (8, 8, 3, 3) has 3"),
    ({"allow_tf32": 2}, "allow_tf32 must be 0 or 1, got 2"),
    ({"num_groups": 3}, "C=8 is not divisible by num_groups=3"),
])
def test_bad_attributes_fail_at_session_creation(fo, change, needle):
    a, t = _case(**CASES["stride1_model4_like"])
    model = _node_model(a, t, node_attrs={**a.onnx_attrs(OP), **change}, name="bad_convt")
    msg = _creation_error(fo, model)
    assert f"fusedops {OP} node 'bad_convt': " in msg and needle in msg, msg


def test_run_time_shape_error_names_the_node(fo):
    """Shapes unknown to the graph: W's in_channels against X's is checked when the run's plan is made."""
    a, t = _case(**CASES["groups2"])
    sess = fo.session(_node_model(a, t, name="dyn_convt", static=False), providers=CPU)
    feeds = _feeds(t)
    feeds["X"] = feeds["X"][:, :4]
    with pytest.raises(Exception) as ei:
        sess.run(None, feeds)
    msg = str(ei.value)
    assert f"fusedops {OP} node 'dyn_convt': " in msg and "W" in msg, msg
