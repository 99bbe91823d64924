"""ConvTransposeGroupNormAct's ONNX function body (standard ops: ConvTranspose, then GroupNormAct's body) run by
onnxruntime on the CPU WITHOUT the fusedops library, against the float64 PyTorch reference."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from fusedops import catalog
from fusedops.exporter.functions import build_function

OP = catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name
# Measured worst |got - want| (float32 body against float64, onnxruntime 1.31 CPU, opsets 17 and 20): 1.07e-6
# (model4_like), 4.9e-7-9.2e-7 for the other cases, on outputs up to |y| ~ 10 (float32's spacing at 8: 9.5e-7). 1e-5
# is ~10x the measured worst and still far below what a wrong pad, crop or group gives (errors of order 1).
TOL = 1e-5
CASES = {
    "model4_like": dict(x=(2, 8, 12, 12), w=(8, 8, 3, 3), G=4, pre="gelu"),
    "stride2_pads_outpad_group2": dict(x=(2, 6, 5, 7), w=(6, 4, 3, 3), G=4, strides=[2, 2], pads=[1, 0, 2, 1],
                                       output_padding=[1, 1], group=2, pre="gelu", post="mul(@0);relu"),
    "one_d": dict(x=(3, 4, 11), w=(4, 6, 5), G=3, strides=[2], pads=[2, 1], output_padding=[1], dilations=[1],
                  pre="silu", reduce="max"),
    "one_d_group2_dilation": dict(x=(2, 4, 9), w=(4, 3, 3), G=2, strides=[2], pads=[1, 1], dilations=[2], group=2,
                                  kernel_shape=[3], pre="gelu"),
    "no_bias": dict(x=(2, 4, 6, 6), w=(4, 4, 2, 2), G=2, strides=[2, 2], bias=False, pre="relu"),
}


def _case(x, w, G, bias=True, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    a = catalog.parse_attrs(OP, {"num_groups": G, **attrs})
    c = w[1] * a.conv.group
    t = {"X": rng.standard_normal(x).astype(np.float32) * 1.5 + 0.2,
         "W": (rng.standard_normal(w) / np.sqrt(w[0] * np.prod(w[2:]))).astype(np.float32),
         "B": rng.standard_normal(c).astype(np.float32) * 0.3 if bias else None,
         "gamma": rng.uniform(0.5, 1.5, c).astype(np.float32), "beta": rng.standard_normal(c).astype(np.float32)}
    t.update({f"extra_{k}": rng.standard_normal(c).astype(np.float32) for k in range(a.num_extras)})
    return a, t


def _node_model(a: catalog.FusedAttrs, t: dict, opset: int) -> onnx.ModelProto:
    names = [n if v is not None else "" for n, v in t.items()]
    node = helper.make_node(OP, names, ["Y"], domain=catalog.DOMAIN, **a.onnx_attrs(OP))
    fn = build_function(OP, a, t["X"].ndim, opset, num_extras=a.num_extras)
    node.overload = fn.overload
    graph = helper.make_graph([node], "convt", [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape)
                                                for n, v in t.items() if v is not None],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, catalog.output_shape(
                                  OP, t["X"].shape, a, t["W"].shape))])
    model = helper.make_model(graph, ir_version=10, functions=[fn], opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(catalog.DOMAIN, catalog.VERSION)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _reference(a: catalog.FusedAttrs, t: dict) -> np.ndarray:
    d = {k: None if v is None else torch.from_numpy(v).double() for k, v in t.items()}
    extras = [d[f"extra_{k}"] for k in range(a.num_extras)]
    return catalog.convtranspose_group_norm_act_reference(d["X"], d["W"], d["B"], d["gamma"], d["beta"], extras,
                                                          a).numpy()


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("name", sorted(CASES))
def test_function_body_on_onnxruntime_without_the_library(name, opset):
    a, t = _case(**CASES[name])
    sess = ort.InferenceSession(_node_model(a, t, opset).SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {k: v for k, v in t.items() if v is not None})[0]
    want = _reference(a, t)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL, atol=TOL, err_msg=name)


def test_nodes_differing_only_in_conv_attributes_share_one_function():
    """The conv attributes are attribute references, like num_groups and epsilon: they do not split functions."""
    a1, _ = _case(**CASES["model4_like"])
    a2, _ = _case(**{**CASES["model4_like"], "strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2})
    assert build_function(OP, a1, 4, 20).overload == build_function(OP, a2, 4, 20).overload


def test_rank_outside_the_op_is_named():
    a, _ = _case(**CASES["model4_like"])
    with pytest.raises(catalog.CatalogError, match="X must have rank 3-4"):
        build_function(OP, a, 5, 20)
