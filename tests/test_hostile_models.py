"""Hostile models through the fuser (``fusedops fuse`` / ``fusedops.fuse``): ill-typed, unknown or omitted
attributes, impossible shapes, duplicate names, absurd declared sizes. Each ends in one ModelError (CLI: exit 2)
whose text names the node, the attribute or the value; legal oddities (an omitted epsilon) fuse and run."""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto as A
from onnx import helper

from fusedops.errors import ModelError
from fusedops.exporter.fuse import fuse_model
from hostile_support import cli, fused_node_model, gn_model, raw_attr, save, vinfo

GN = "GroupNormalization node 'gn'"
FN = "fusedops node 'fused'"


def _fails(model: onnx.ModelProto) -> str:
    with pytest.raises(ModelError) as ei:
        fuse_model(model)
    return str(ei.value)


# ---------------------------------------------------------------------------------------------------------------------
# GroupNormalization nodes
# ---------------------------------------------------------------------------------------------------------------------

GN_CASES = [
    ("num_groups FLOAT", dict(attrs={}, raw_attrs=[raw_attr("num_groups", A.FLOAT, f=4.0)]),
     f"{GN}: attribute 'num_groups' must be INT, got FLOAT"),
    ("num_groups STRING", dict(attrs={}, raw_attrs=[raw_attr("num_groups", A.STRING, s=b"4")]),
     f"{GN}: attribute 'num_groups' must be INT, got STRING"),
    ("num_groups INTS", dict(attrs={}, raw_attrs=[raw_attr("num_groups", A.INTS, ints=[4])]),
     f"{GN}: attribute 'num_groups' must be INT, got INTS"),
    ("num_groups missing", dict(attrs={"epsilon": 1e-5}), f"{GN}: attribute 'num_groups' is required"),
    ("num_groups 0", dict(attrs={"num_groups": 0}), f"{GN}: num_groups must be a positive integer, got 0"),
    ("num_groups -4", dict(attrs={"num_groups": -4}), f"{GN}: num_groups must be a positive integer, got -4"),
    ("epsilon STRING", dict(attrs={"num_groups": 4}, raw_attrs=[raw_attr("epsilon", A.STRING, s=b"1e-5")]),
     f"{GN}: attribute 'epsilon' must be FLOAT, got STRING"),
    ("epsilon INT", dict(attrs={"num_groups": 4}, raw_attrs=[raw_attr("epsilon", A.INT, i=0)]),
     f"{GN}: attribute 'epsilon' must be FLOAT, got INT"),
    ("epsilon negative", dict(attrs={"num_groups": 4, "epsilon": -1.0}),
     f"{GN}: epsilon must be a finite non-negative number, got -1.0"),
    ("epsilon nan", dict(attrs={"num_groups": 4, "epsilon": float("nan")}),
     f"{GN}: epsilon must be a finite non-negative number, got nan"),
    ("epsilon inf", dict(attrs={"num_groups": 4, "epsilon": float("inf")}),
     f"{GN}: epsilon must be a finite non-negative number, got inf"),
    ("unknown epsilom", dict(attrs={"num_groups": 4, "epsilom": 1e-3}),
     f"{GN}: unknown attribute 'epsilom' (GroupNormalization-21 takes epsilon, num_groups, stash_type)"),
    ("stash_type before 21", dict(opset=18, attrs={"num_groups": 4, "stash_type": 1}),
     f"{GN}: unknown attribute 'stash_type' (GroupNormalization-18 takes epsilon, num_groups)"),
    ("opset 17", dict(opset=17), f"{GN}: GroupNormalization needs default-domain opset 18 or newer; the model "
                                 f"imports opset 17"),
    ("scale short (21)", dict(scale_len=7),
     f"{GN}: scale has 7 elements; GroupNormalization-21 takes one per channel (C=8)"),
    ("bias long (21)", dict(bias_len=9),
     f"{GN}: bias has 9 elements; GroupNormalization-21 takes one per channel (C=8)"),
    ("scale per channel in 18", dict(opset=18, scale_len=8),
     f"{GN}: scale has 8 elements; GroupNormalization-18 takes one per group (num_groups=4)"),
    ("C not divisible", dict(G=3, scale_len=8, bias_len=8),
     f"{GN}: channels C=8 is not divisible by num_groups=3"),
    ("rank 1", dict(x_shape=[8]), f"{GN}: X must have rank >= 2 (N, C, ...), got shape (8,)"),
    ("C = 2**40", dict(C=2**40, G=1, opset=18, x_shape=["N", 2**40, 1]),
     f"{GN}: C=1099511627776 channels is more than the fuser supports (16777216)"),
    ("C = 2**29", dict(C=2**29, G=1, opset=18, x_shape=["N", 2**29, 1]),
     f"{GN}: C=536870912 channels is more than the fuser supports (16777216)"),
]


@pytest.mark.parametrize("kw,message", [c[1:] for c in GN_CASES], ids=[c[0] for c in GN_CASES])
def test_group_normalization_problems_are_named(kw, message):
    assert _fails(gn_model(**kw)) == message


def test_tiny_model_declaring_huge_channels_is_rejected_before_allocating():
    m = gn_model(C=2**40, G=1, opset=18, x_shape=["N", 2**40, 1])
    assert len(m.SerializeToString()) < 300  # the issue's 240-byte model: nothing of C's size may be allocated
    t0 = time.perf_counter()
    _fails(m)
    assert time.perf_counter() - t0 < 10


def test_omitted_epsilon_is_legal_and_defaults(tmp_path):
    fused = fuse_model(gn_model(attrs={"num_groups": 4}))
    (node,) = fused.graph.node
    assert node.op_type == "GroupNormAct"
    assert {a.name: a for a in node.attribute}["epsilon"].f == pytest.approx(1e-5)


def test_rank_six_group_norm_stays_a_standard_node():
    # The catalog's ops take rank 2-5; a rank-6 GroupNormalization is valid ONNX and is left as it is.
    fused = fuse_model(gn_model(x_shape=["N", 8, 2, 2, 2, 2]))
    assert [n.op_type for n in fused.graph.node] == ["GroupNormalization"]


# ---------------------------------------------------------------------------------------------------------------------
# fusedops nodes written by hand (or by another tool)
# ---------------------------------------------------------------------------------------------------------------------

FUSED_CASES = [
    ("num_groups FLOAT", dict(attrs={}, raw_attrs=[raw_attr("num_groups", A.FLOAT, f=4.0)]),
     f"{FN}: attribute 'num_groups' must be INT, got FLOAT"),
    ("num_groups STRING", dict(attrs={}, raw_attrs=[raw_attr("num_groups", A.STRING, s=b"4")]),
     f"{FN}: attribute 'num_groups' must be INT, got STRING"),
    ("num_groups INTS", dict(attrs={}, raw_attrs=[raw_attr("num_groups", A.INTS, ints=[4])]),
     f"{FN}: attribute 'num_groups' must be INT, got INTS"),
    ("num_groups missing", dict(attrs={"epsilon": 1e-5}), f"{FN}: GroupNormAct: attribute 'num_groups' is required"),
    ("num_groups 2**40", dict(attrs={"num_groups": 2**40}),
     f"{FN}: GroupNormAct: num_groups must be positive and at most 2147483647, got 1099511627776"),
    ("epsilon STRING", dict(attrs={"num_groups": 4}, raw_attrs=[raw_attr("epsilon", A.STRING, s=b"x")]),
     f"{FN}: attribute 'epsilon' must be FLOAT, got STRING"),
    ("epsilon -1", dict(attrs={"num_groups": 4, "epsilon": -1.0}),
     f"{FN}: GroupNormAct: epsilon must be a finite non-negative number, got -1.0"),
    ("pre INT", dict(attrs={"num_groups": 4}, raw_attrs=[raw_attr("pre", A.INT, i=3)]),
     f"{FN}: attribute 'pre' must be STRING, got INT"),
    ("post FLOATS", dict(attrs={"num_groups": 4}, raw_attrs=[raw_attr("post", A.FLOATS, floats=[1.0])]),
     f"{FN}: attribute 'post' must be STRING, got FLOATS"),
    ("pre not UTF-8", dict(attrs={"num_groups": 4}, raw_attrs=[raw_attr("pre", A.STRING, s=b"relu\xff")]),
     f"{FN}: attribute 'pre' is not valid UTF-8 (byte 0xff at offset 4)"),
    ("pre embedded NUL", dict(attrs={"num_groups": 4, "pre": b"relu\x00gelu"}),
     f"{FN}: GroupNormAct: attribute 'pre': chain text has a control character 0x00 at offset 4"),
    ("pre unicode digit", dict(attrs={"num_groups": 4, "pre": "add(\uff11)"}),
     f"{FN}: GroupNormAct: attribute 'pre': chain text has a non-ASCII byte 0xef at offset 4 (only ASCII is "
     f"accepted)"),
    ("post hardtanh min > max", dict(attrs={"num_groups": 4, "post": "hardtanh(1,-1)"}),
     f"{FN}: GroupNormAct: attribute 'post': step 'hardtanh' needs min <= max, got min=1 and max=-1"),
    ("reduce median", dict(attrs={"num_groups": 4, "reduce": "median"}),
     f"{FN}: GroupNormAct: attribute 'reduce': unknown reduce 'median'; expected one of '', 'min', 'max', 'sum', "
     f"'mean', 'logsumexp'"),
    ("unknown epsilom", dict(attrs={"num_groups": 4, "epsilom": 0.5}),
     f"{FN}: unknown attribute 'epsilom'; GroupNormAct takes epsilon, num_groups, plugin_namespace, "
     f"plugin_version, post, pre, reduce"),
    ("attribute twice", dict(attrs={"num_groups": 4}, raw_attrs=[raw_attr("num_groups", A.INT, i=2)]),
     f"{FN}: attribute 'num_groups' is given twice"),
    ("plugin_version 2", dict(attrs={"num_groups": 4, "plugin_version": "2"}),
     f"{FN}: GroupNormAct: plugin_version must be '1', got '2'"),
    ("trans_b on GroupNormAct", dict(attrs={"num_groups": 4, "trans_b": 1}),
     f"{FN}: unknown attribute 'trans_b'; GroupNormAct takes epsilon, num_groups, plugin_namespace, "
     f"plugin_version, post, pre, reduce"),
    ("gemm trans_b 2", dict(op="GemmGroupNormAct", attrs={"num_groups": 4, "trans_b": 2}),
     f"{FN}: GemmGroupNormAct: trans_b must be 0 or 1, got 2"),
    ("rank 6", dict(x_shape=["N", 8, 2, 2, 2, 2]),
     f"{FN}: X must have rank 2-5 (N, C, *spatial), got shape (?, 8, 2, 2, 2, 2)"),
    ("rank 1", dict(x_shape=[8]), f"{FN}: X must have rank 2-5 (N, C, *spatial), got shape (8,)"),
    ("gamma short", dict(gamma_len=7), f"{FN}: gamma 'gamma' has 7 elements, expected C=8"),
    ("C not divisible", dict(attrs={"num_groups": 3}), f"{FN}: C=8 is not divisible by num_groups=3"),
    ("missing extra", dict(attrs={"num_groups": 4, "pre": "add(@1)"}, extras=1),
     f"{FN}: chains reference 2 extra input(s), got 1"),
    ("nine extras", dict(attrs={"num_groups": 4}, extras=9), f"{FN}: at most 8 extra inputs, got 9"),
    ("two outputs", dict(outputs=("Y", "Z")), f"{FN}: GroupNormAct has exactly one output, got 2"),
    ("gemm K mismatch", dict(op="GemmGroupNormAct", x_shape=["N", 5]),
     f"{FN}: X has K=5 features but W of shape (8, 6) (trans_b=1) expects 6"),
]


@pytest.mark.parametrize("kw,message", [c[1:] for c in FUSED_CASES], ids=[c[0] for c in FUSED_CASES])
def test_fused_node_problems_are_named(kw, message):
    assert _fails(fused_node_model(**kw)) == message


def test_unknown_fused_op():
    m = fused_node_model()
    m.graph.node[0].op_type = "GroupNormActivation"
    assert _fails(m) == (f"{FN}: unknown op 'GroupNormActivation'; known: GroupNormAct, GemmGroupNormAct, "
                         "ConvTransposeGroupNormAct")


@pytest.mark.parametrize("op", ["GroupNormAct", "GemmGroupNormAct"])
def test_omitted_attributes_get_their_defaults_and_run(op):
    # Only num_groups given: the fuser writes every attribute out (ORT passes no function-level defaults) and the
    # function body runs.
    fused = fuse_model(fused_node_model(op, attrs={"num_groups": 4}))
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in fused.graph.node[0].attribute}
    assert attrs["epsilon"] == pytest.approx(1e-5) and attrs["pre"] == b"" and attrs["plugin_version"] == b"1"
    x = np.random.default_rng(1).standard_normal((3, 8, 3) if op == "GroupNormAct" else (3, 6)).astype(np.float32)
    y = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    assert y.shape == (3, 8, 3) if op == "GroupNormAct" else (3, 8)
    assert np.isfinite(y).all()


# ---------------------------------------------------------------------------------------------------------------------
# Graph structure
# ---------------------------------------------------------------------------------------------------------------------

def test_duplicate_output_names():
    m = gn_model()
    m.graph.node.append(helper.make_node("Relu", ["X"], ["Y"], name="dup"))
    assert _fails(m) == ("value 'Y' is produced twice (by node 'gn' and by node 'dup'); every value must have one "
                         "producer")


def test_node_output_shadowing_a_graph_input():
    m = gn_model()
    m.graph.node.insert(0, helper.make_node("Relu", ["scale"], ["X"], name="shadow"))
    assert _fails(m) == ("value 'X' is produced twice (by graph input 'X' and by node 'shadow'); every value must "
                         "have one producer")


def test_graph_output_listed_twice():
    m = gn_model()
    m.graph.output.append(vinfo("Y", ["N", 8, 5]))
    assert _fails(m) == "graph output 'Y' is listed twice"


def test_graph_input_without_a_shape():
    m = gn_model()
    m.graph.input[0].type.tensor_type.ClearField("shape")
    assert _fails(m) == ("graph input 'X' has a tensor type without a shape; ONNX requires one (dimensions may be "
                         "left symbolic, e.g. 'N')")


def test_negative_declared_dimension():
    m = gn_model()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_value = -3
    assert _fails(m) == "graph input 'X' declares a negative dimension -3"


def test_initializer_whose_data_does_not_match_its_shape():
    m = gn_model()
    t = m.graph.initializer[0]
    del t.dims[:]
    t.dims.append(2**40)
    assert _fails(m) == ("initializer 'scale' declares shape [1099511627776] (1099511627776 elements) but holds "
                         "32 bytes of data")


def test_symbolic_dims_and_no_value_info_still_fuse():
    m = gn_model(x_shape=["N", 8, "S"])
    fused = fuse_model(m)
    assert [n.op_type for n in fused.graph.node] == ["GroupNormAct"]


def test_through_the_cli_it_is_one_line_and_exit_2(capsys, tmp_path):
    src = save(gn_model(attrs={"num_groups": 4, "epsilom": 1e-3}), tmp_path / "m.onnx")
    rc, _, err = cli(capsys, "fuse", src, tmp_path / "out.onnx")
    assert (rc, err) == (2, f"{GN}: unknown attribute 'epsilom' (GroupNormalization-21 takes epsilon, num_groups, "
                            f"stash_type)")
    assert not (tmp_path / "out.onnx").exists()


def test_other_invalid_models_end_in_the_checkers_first_line():
    m = gn_model()
    m.graph.input[0].ClearField("type")
    assert _fails(m) == "the input model is not valid ONNX: Field 'type' of 'value_info' is required but missing."


def test_a_model_with_no_fusable_node_is_still_checked():
    x, y = vinfo("X", ["N", 4]), vinfo("Y", ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"]), helper.make_node("Relu", ["X"], ["Y"])],
                              "g", [x], [y])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    assert _fails(m) == ("value 'Y' is produced twice (by node #0 (unnamed) and by node #1 (unnamed)); every value "
                         "must have one producer")


def test_per_group_scale_of_opset_18_expands_and_matches_the_reference():
    m = gn_model(opset=18)
    fused = fuse_model(m)
    x = np.random.default_rng(3).standard_normal((2, 8, 5)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    got = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_declared_output_shape_that_contradicts_the_op():
    m = fused_node_model("GemmGroupNormAct", attrs={"num_groups": 4, "reduce": "max"})
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 8
    assert _fails(m) == (f"{FN}: output 'Y' is declared with shape (?, 8), but GemmGroupNormAct with reduce='max' "
                         f"produces (?, 1)")


def test_a_megabyte_chain_attribute_does_not_hang_the_fuser():
    t0 = time.perf_counter()
    message = _fails(fused_node_model(attrs={"num_groups": 4, "post": "9" * (1 << 20)}))
    assert time.perf_counter() - t0 < 10
    assert message == f"{FN}: GroupNormAct: attribute 'post': chain text is longer than 4096 bytes"
