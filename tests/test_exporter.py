"""Exporter end to end: the four reference models exported, fused, checked and run by ONNX Runtime (CPU, function
bodies) against eager PyTorch and the unfused export; plus the function bodies alone against the float64 catalog
reference for every step kind, reduction and opset 17-23."""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from fusedops import catalog, exporter_api
from fusedops.exporter import build_function, fuse_model, fusion_summary
from fusedops.exporter.export import INPUT_NAME, export_model
from fusedops.models.registry import get_entry

# Function bodies and the unfused graph compute the same float32 math in a different order.
ATOL = 1e-5

EXPECTED = {
    # model -> (fused op, pre, post, reduce, op types left in the graph besides the fused node)
    "1": ("GemmGroupNormAct", "", "leaky_relu(0.01);mul(2)", "", []),
    "2": ("GemmGroupNormAct", "", "", "min", ["Add"]),
    "3": ("GemmGroupNormAct", "add(@0);hardtanh(-1,1);mish", "", "", []),
    "4": ("GroupNormAct", "gelu", "", "", ["ConvTranspose"]),
}


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def exported():
    """model number -> (entry, unfused ModelProto, fused ModelProto), exported once at the small size."""
    out = {}
    for number in EXPECTED:
        entry = get_entry(number)
        unfused = export_model(entry, "small")
        out[number] = (entry, unfused, fuse_model(unfused))
    return out


@pytest.mark.parametrize("number", list(EXPECTED))
def test_fused_graph_structure(exported, number):
    _, unfused, fused = exported[number]
    op, pre, post, reduce, rest = EXPECTED[number]
    custom = [n for n in fused.graph.node if n.domain == catalog.DOMAIN]
    assert len(custom) == 1, [n.op_type for n in fused.graph.node]
    node = custom[0]
    assert node.op_type == op
    assert sorted(n.op_type for n in fused.graph.node if n.domain != catalog.DOMAIN) == sorted(rest)
    (summary_op, attrs), = fusion_summary(fused)
    assert summary_op == op
    # every attribute explicit, exactly the catalog's, and valid
    assert set(attrs) == {a.name for a in catalog.OPS[op].attrs}
    fa = catalog.parse_attrs(op, attrs)
    assert catalog.chain_text(fa.pre) == catalog.chain_text(catalog.parse_chain(pre))
    assert catalog.chain_text(fa.post) == catalog.chain_text(catalog.parse_chain(post))
    assert fa.reduce == reduce
    assert attrs["plugin_namespace"] == "fusedops" and attrs["plugin_version"] == "1"
    assert len(node.input) == len(catalog.OPS[op].inputs) + fa.num_extras
    if op == "GemmGroupNormAct":
        assert attrs["trans_b"] == 1 and attrs["allow_tf32"] == 1
        # nn.Linear's weight and bias feed the fused node directly
        inits = {i.name for i in fused.graph.initializer}
        assert node.input[1] in inits and node.input[2] in inits
    # model-level contract
    onnx.checker.check_model(fused, full_check=True)
    assert fused.ir_version <= 10
    assert {(o.domain, o.version) for o in fused.opset_import} >= {("", 20), ("fusedops", 1)}
    fns = {(f.domain, f.name, f.overload): f for f in fused.functions}
    assert (catalog.DOMAIN, op, node.overload) in fns and node.overload
    fn = fns[(catalog.DOMAIN, op, node.overload)]
    assert all(n.domain == "" for n in fn.node), "function bodies use standard ops only"
    assert [(o.domain, o.version) for o in fn.opset_import] == [("", 20)]
    assert len(fused.functions) == 1  # one configuration: runs on every ORT >= 1.21 without our library
    assert "fusedops.function_overloads" not in {p.key for p in fused.metadata_props}
    assert [o.name for o in fused.graph.output] == [o.name for o in unfused.graph.output]


@pytest.mark.parametrize("number", list(EXPECTED))
def test_shape_inference_keeps_output_shapes(exported, number):
    _, unfused, fused = exported[number]
    inferred = onnx.shape_inference.infer_shapes(fused, strict_mode=True)
    node = next(n for n in inferred.graph.node if n.domain == catalog.DOMAIN)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    assert node.output[0] in known

    def dims(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    assert [dims(v) for v in inferred.graph.output] == [dims(v) for v in unfused.graph.output]


@pytest.mark.parametrize("number", list(EXPECTED))
@pytest.mark.parametrize("batch", [None, 1, 7])
def test_ort_runs_fused_model_and_matches_eager(exported, number, batch):
    entry, unfused, fused = exported[number]
    module = entry.build("small")
    gen = torch.Generator().manual_seed(1234 + (batch or 0))
    (x,) = entry.inputs("small", batch=batch, generator=gen)
    with torch.no_grad():
        eager = module(x).numpy()
    feed = {fused.graph.input[0].name: x.numpy()}
    y_fused = _session(fused).run(None, feed)[0]
    y_unfused = _session(unfused).run(None, feed)[0]
    assert y_fused.shape == eager.shape
    assert np.isfinite(y_fused).all()
    np.testing.assert_allclose(y_fused, eager, rtol=0, atol=ATOL)
    np.testing.assert_allclose(y_fused, y_unfused, rtol=0, atol=ATOL)
    # the fused output is not trivially constant (a broken GroupNorm often is)
    assert y_fused.std() > 1e-3


def test_fusing_is_deterministic_and_idempotent(exported):
    _, unfused, fused = exported["3"]
    again = fuse_model(unfused)
    assert [n.overload for n in again.graph.node] == [n.overload for n in fused.graph.node]
    assert [(f.name, f.overload) for f in again.functions] == [(f.name, f.overload) for f in fused.functions]
    # fusing a fused model changes nothing
    twice = fuse_model(fused)
    assert [(n.op_type, n.overload) for n in twice.graph.node] == [(n.op_type, n.overload) for n in fused.graph.node]
    assert len(twice.functions) == len(fused.functions)


def test_static_batch_export_fuses_too():
    entry = get_entry("1")
    unfused = export_model(entry, "small", dynamic_batch=False)
    fused = fuse_model(unfused)
    assert [n.op_type for n in fused.graph.node] == ["GemmGroupNormAct"]
    (x,) = entry.inputs("small", generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        eager = entry.build("small")(x).numpy()
    np.testing.assert_allclose(_session(fused).run(None, {INPUT_NAME: x.numpy()})[0], eager, rtol=0, atol=ATOL)


def test_api_export_writes_checked_fused_file(tmp_path):
    out = exporter_api.export("gemm_groupnorm_min_biasadd", tmp_path / "m2.onnx")
    assert out == tmp_path / "m2.onnx" and out.exists()
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert [op for op, _ in exporter_api.fusion_summary(model)] == ["GemmGroupNormAct"]
    assert exporter_api.fusion_summary(out) == exporter_api.fusion_summary(model)
    assert [p.name for p in tmp_path.iterdir()] == ["m2.onnx"], "no temp files left behind"
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask, "the same permissions as any new file (not mkstemp's 0600)"
    # fuse_file on the unfused export gives the same fused graph
    plain = exporter_api.export_unfused("2", tmp_path / "plain.onnx")
    assert not exporter_api.fusion_summary(plain)
    fused = exporter_api.fuse_file(plain, tmp_path / "fused.onnx")
    assert exporter_api.fusion_summary(fused) == exporter_api.fusion_summary(model)


# ---------------------------------------------------------------------------------------------------------------------
# Function bodies alone, against the float64 catalog reference
# ---------------------------------------------------------------------------------------------------------------------

BODY_CASES = [
    ("GroupNormAct", dict(num_groups=3, pre="gelu;add(@0);mish", post="softplus(2,3);hardtanh(-inf,0.5);mul(@1)",
                          reduce="logsumexp"), (4, 6, 5, 3)),
    ("GroupNormAct", dict(num_groups=2, pre="gelu_tanh;silu;hardswish;hardsigmoid(0.3,0.4)",
                          post="leaky_relu(0.2);rsub(@0)", reduce="min"), (4, 6)),
    ("GroupNormAct", dict(num_groups=2, pre="tanh;sigmoid;relu", post="sub(1.5);div(@0)", reduce="sum"),
     (3, 6, 2, 2, 2)),
    ("GroupNormAct", dict(num_groups=6, pre="sigmoid;add(1);rdiv(@0)", post="softplus", reduce="max"), (2, 6, 7)),
    ("GroupNormAct", dict(num_groups=1, epsilon=1e-3, pre="", post="", reduce="mean"), (2, 4, 3, 3)),
    ("GemmGroupNormAct", dict(num_groups=5, pre="add(@0);hardtanh;mish", reduce="mean", trans_b=1), (7, 12)),
    ("GemmGroupNormAct", dict(num_groups=5, post="leaky_relu;mul(2)", reduce="max", trans_b=0), (2, 7, 12)),
    ("GemmGroupNormAct", dict(num_groups=2, pre="gelu", post="mul(@1);add(@0)", trans_b=1), (5, 12)),
]


def _single_node_model(op, fa, x_shape, opset, inits):
    fn = build_function(op, fa, len(x_shape), opset)
    names = ["X", *inits]
    node = helper.make_node(op, names, ["Y"], domain=catalog.DOMAIN, **fa.onnx_attrs(op))
    node.overload = fn.overload
    graph = helper.make_graph(
        [node], "single",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", *x_shape[1:]])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [f"d{i}" for i in range(len(x_shape))])],
        [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, ir_version=10, functions=[fn],
                              opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(catalog.DOMAIN, 1)])
    return model


@pytest.mark.parametrize("opset", [17, 18, 20, 21, 23])
@pytest.mark.parametrize("case", range(len(BODY_CASES)))
def test_function_body_matches_float64_reference(opset, case):
    op, attrs, x_shape = BODY_CASES[case]
    fa = catalog.parse_attrs(op, attrs)
    rng = np.random.default_rng(100 + case)
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    inits = {}
    if op == "GemmGroupNormAct":
        K, C = x_shape[-1], 10
        inits["W"] = rng.standard_normal((C, K) if fa.trans_b else (K, C)).astype(np.float32) / math.sqrt(K)
        inits["B"] = rng.standard_normal(C).astype(np.float32)
    else:
        C = x_shape[1]
    inits["gamma"] = rng.standard_normal(C).astype(np.float32)
    inits["beta"] = rng.standard_normal(C).astype(np.float32)
    for k in range(fa.num_extras):
        inits[f"extra_{k}"] = (rng.uniform(0.5, 2.0, C) * rng.choice([-1, 1], C)).astype(np.float32)
    model = _single_node_model(op, fa, x_shape, opset, inits)
    onnx.checker.check_model(model, full_check=True)
    y = _session(model).run(None, {"X": x})[0]
    t = {k: torch.from_numpy(v).double() for k, v in inits.items()}
    extras = [t[f"extra_{k}"] for k in range(fa.num_extras)]
    xt = torch.from_numpy(x).double()
    if op == "GemmGroupNormAct":
        ref = catalog.gemm_group_norm_act_reference(xt, t["W"], t["B"], t["gamma"], t["beta"], extras, fa)
    else:
        ref = catalog.group_norm_act_reference(xt, t["gamma"], t["beta"], extras, fa)
    assert y.shape == tuple(ref.shape)
    # float32 body vs float64 reference: relative to the output's magnitude
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5 * max(1.0, float(ref.abs().max())))


def test_function_overloads_distinguish_configurations():
    a = catalog.parse_attrs("GroupNormAct", dict(num_groups=2, post="relu"))
    b = catalog.parse_attrs("GroupNormAct", dict(num_groups=2, post="sigmoid"))
    fa, fb = build_function("GroupNormAct", a, 4, 20), build_function("GroupNormAct", b, 4, 20)
    assert fa.overload != fb.overload
    assert build_function("GroupNormAct", a, 4, 20).overload == fa.overload  # stable
    assert build_function("GroupNormAct", a, 4, 18).overload != fa.overload  # the opset is part of the body
    # what a body reads from the node or the input shape does not split functions
    a8 = catalog.parse_attrs("GroupNormAct", dict(num_groups=8, epsilon=1e-3, post="relu"))
    assert build_function("GroupNormAct", a8, 3, 20).overload == fa.overload
    with pytest.raises(catalog.CatalogError, match="opset 16"):
        build_function("GroupNormAct", a, 4, 16)


def test_nodes_differing_in_groups_epsilon_and_rank_share_one_body():
    """num_groups / epsilon are attribute references and C / rank come from the input: one function, and ORT runs
    every node with its own values."""
    fa_list = [catalog.parse_attrs("GroupNormAct", dict(num_groups=g, epsilon=e, post="silu"))
               for g, e in ((1, 1e-5), (2, 0.5), (4, 1e-2))]
    shapes = [(3, 4), (3, 8, 5), (3, 4, 2, 3)]
    rng = np.random.default_rng(7)
    fn = build_function("GroupNormAct", fa_list[0], None, 20)
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for i, (fa, shape) in enumerate(zip(fa_list, shapes)):
        c = shape[1]
        inits += [onnx.numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"g{i}"),
                  onnx.numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"b{i}")]
        node = helper.make_node("GroupNormAct", [f"x{i}", f"g{i}", f"b{i}"], [f"y{i}"], domain=catalog.DOMAIN,
                                **fa.onnx_attrs("GroupNormAct"))
        assert build_function("GroupNormAct", fa, len(shape), 20).overload == fn.overload
        node.overload = fn.overload
        nodes.append(node)
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, list(shape)))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, list(shape)))
        feeds[f"x{i}"] = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
    model = helper.make_model(helper.make_graph(nodes, "three", inputs, outputs, inits), ir_version=10,
                              functions=[fn], opset_imports=[helper.make_opsetid("", 20),
                                                             helper.make_opsetid(catalog.DOMAIN, 1)])
    onnx.checker.check_model(model, full_check=True)
    ys = _session(model).run(None, feeds)
    arrays = {i.name: torch.from_numpy(onnx.numpy_helper.to_array(i).copy()).double() for i in inits}
    for i, (fa, y) in enumerate(zip(fa_list, ys)):
        ref = catalog.group_norm_act_reference(torch.from_numpy(feeds[f"x{i}"]).double(), arrays[f"g{i}"],
                                               arrays[f"b{i}"], [], fa)
        np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5)
