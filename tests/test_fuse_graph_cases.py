"""The fuser on fixed ONNX graphs (builders: fuse_graphs.py): function overloads shared or not, the float64
reference on the fused attributes, every supported opset, the ABI's chain limits, refusal after a hand edit."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

from fusedops import catalog
from fusedops.exporter import fuse_model

from fuse_graphs import Graph, check_same_results, fused_node, group_norm_fixed, make_model, run, torch_group_norm


def test_identical_configurations_share_one_function_and_different_ones_do_not():
    g = Graph(3, 4, 20)
    outs = []
    for post in ("Relu", "Relu", "Sigmoid"):
        y = group_norm_fixed(g, "x", 2)
        outs.append(g.op(post, [y]))
    model = make_model(g, [2, 4, 5], outs)
    fused = fuse_model(model)
    nodes = [n for n in fused.graph.node if n.domain == catalog.DOMAIN]
    assert len(nodes) == 3
    assert nodes[0].overload == nodes[1].overload != nodes[2].overload
    assert sorted(f.overload for f in fused.functions) == sorted({n.overload for n in nodes})
    notes = {p.key: p.value for p in fused.metadata_props}
    assert "GroupNormAct: 2 function overloads" in notes["fusedops.function_overloads"]
    x = np.random.default_rng(2).standard_normal((2, 4, 5)).astype(np.float32)
    for want, got in zip(run(model, x), run(fused, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)



def test_float64_reference_agrees_with_fused_attributes():
    """The fused node's attributes mean what the unfused graph computes: catalog reference (float64) on the
    fused node's inputs equals ORT on the original graph."""
    data_rng = np.random.default_rng(3)
    g = Graph(4, 6, 20)
    z = g.op("Mul", ["x", g.const(data_rng.uniform(0.5, 2, (6, 1, 1)).astype(np.float32))])
    z = g.op("Gelu", [z])
    y = group_norm_fixed(g, z, 3)
    y = g.op("LeakyRelu", [y], alpha=0.1)
    y = g.op("Sub", [g.const(np.array(0.25, np.float32)), y])
    y = g.op("ReduceMax", [y, g.const(np.array([-3], np.int64))], keepdims=1)
    model = make_model(g, [2, 6, 3, 5], [y])
    fused = fuse_model(model)
    node = fused_node(fused)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    fa = catalog.parse_attrs(node.op_type, attrs)
    assert catalog.chain_text(fa.pre) == "mul(@0);gelu" and catalog.chain_text(fa.post) == "leaky_relu(0.1);rsub(0.25)"
    assert fa.reduce == "max"
    inits = {i.name: torch.from_numpy(onnx.numpy_helper.to_array(i).copy()).double() for i in fused.graph.initializer}
    x = data_rng.standard_normal((2, 6, 3, 5)).astype(np.float32)
    ref = catalog.group_norm_act_reference(torch.from_numpy(x).double(), inits[node.input[1]], inits[node.input[2]],
                                           [inits[node.input[3]]], fa)
    (want,) = run(model, x)
    np.testing.assert_allclose(want, ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [17, 18, 20, 21, 23])
def test_every_supported_opset_fuses(opset):
    g = Graph(4, 4, opset)
    y = torch_group_norm(g, "x", 2, np.linspace(0.5, 1.5, 4, dtype=np.float32),
                         np.linspace(-1, 1, 4, dtype=np.float32), 1e-5)
    y = g.op("Relu", [y])
    model = make_model(g, [2, 4, 3, 3], [y])
    fused = fuse_model(model)
    node = fused_node(fused)
    fn = next(f for f in fused.functions if f.overload == node.overload)
    assert [(o.domain, o.version) for o in fn.opset_import] == [("", opset)]
    x = np.random.default_rng(4).standard_normal((2, 4, 3, 3)).astype(np.float32)
    check_same_results(model, fused, x)






def test_chains_longer_than_the_abi_limit_stop_at_16_steps():
    g = Graph(3, 4, 20)
    y = torch_group_norm(g, "x", 2, np.ones(4, np.float32), np.zeros(4, np.float32), 1e-5)
    for k in range(20):
        y = g.op("Mul", [y, g.const(np.full((4, 1), 1.0 + k / 100, np.float32))])  # 20 per-channel operands
    model = make_model(g, [2, 4, 3], [y])
    fused = fuse_model(model)
    node = fused_node(fused)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    steps = catalog.parse_chain(attrs["post"])
    assert len(node.input) - 3 == catalog.MAX_EXTRAS and len(steps) == catalog.MAX_EXTRAS
    assert sum(n.op_type == "Mul" for n in fused.graph.node) == 20 - catalog.MAX_EXTRAS
    x = np.random.default_rng(5).standard_normal((2, 4, 3)).astype(np.float32)
    check_same_results(model, fused, x, arbitrate=False)  # ops remain outside the node
    g2 = Graph(3, 4, 20)
    y = torch_group_norm(g2, "x", 2, np.ones(4, np.float32), np.zeros(4, np.float32), 1e-5)
    for _ in range(20):
        y = g2.op("Tanh", [y])
    fused2 = fuse_model(make_model(g2, [2, 4, 3], [y]))
    attrs2 = {a.name: helper.get_attribute_value(a) for a in fused_node(fused2).attribute}
    assert len(catalog.parse_chain(attrs2["post"])) == catalog.MAX_STEPS
    assert sum(n.op_type == "Tanh" for n in fused2.graph.node) == 20 - catalog.MAX_STEPS


def test_refusing_drops_functions_of_changed_nodes():
    g = Graph(3, 4, 20)
    y = torch_group_norm(g, "x", 2, np.ones(4, np.float32), np.zeros(4, np.float32), 1e-5)
    model = make_model(g, [2, 4, 3], [y])
    fused = fuse_model(model)
    # append a Relu by hand after the fused node, then fuse again: one node, one (new) function
    fused.graph.output[0].name = "gn"
    node = fused_node(fused)
    node.output[0] = "gn"
    fused.graph.node.append(helper.make_node("Relu", ["gn"], ["y"]))
    fused.graph.output[0].name = "y"
    again = fuse_model(fused)
    node2 = fused_node(again)
    assert [f.overload for f in again.functions] == [node2.overload] != [node.overload]
