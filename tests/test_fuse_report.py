"""The fusion report (API and ``fusedops fuse --report / --strict``) and canonicalisation before matching: weights
that reach a GroupNorm through Identity / Cast / Unsqueeze are fused with their neighbours, and a GroupNorm that
cannot be fused is named with its reason."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fusedops import cli
from fusedops.exporter import fuse_model_with_report

C, G = 8, 2


def _gn_graph(opset=21, dtype=TensorProto.FLOAT, scale_via=None, second_consumer=False, dynamic_c=False,
              scale_input=False):
    """x → GroupNormalization(scale, bias) → Sigmoid·x (silu) → y. ``scale_via``: the scale reaches the node
    through "identity", "cast" (a float16 initializer) or "unsqueeze" + "reshape"."""
    rng = np.random.default_rng(3)
    np_dtype = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64}[dtype]
    n_params = C if opset >= 21 else G
    inits = [helper.make_tensor("bias", dtype, [n_params], rng.standard_normal(n_params).astype(np_dtype))]
    nodes = []
    scale = rng.standard_normal(n_params) + 1
    inputs = [helper.make_tensor_value_info("x", dtype, ["N", "C" if dynamic_c else C, 5])]
    if scale_input:
        inputs.append(helper.make_tensor_value_info("scale", dtype, [n_params]))
    elif scale_via == "cast":
        inits.append(helper.make_tensor("scale16", TensorProto.FLOAT16, [n_params], scale.astype(np.float16)))
        nodes.append(helper.make_node("Cast", ["scale16"], ["scale"], to=dtype))
    elif scale_via == "unsqueeze":
        inits.append(helper.make_tensor("scale0", dtype, [1, n_params], scale.astype(np_dtype)))
        inits.append(helper.make_tensor("axes", TensorProto.INT64, [1], [0]))
        inits.append(helper.make_tensor("flat", TensorProto.INT64, [1], [-1]))
        nodes += [helper.make_node("Unsqueeze", ["scale0", "axes"], ["scale1"]),
                  helper.make_node("Reshape", ["scale1", "flat"], ["scale"])]
    else:
        name = "scale0" if scale_via == "identity" else "scale"
        inits.append(helper.make_tensor(name, dtype, [n_params], scale.astype(np_dtype)))
        if scale_via == "identity":
            nodes.append(helper.make_node("Identity", ["scale0"], ["scale"]))
    nodes += [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["gn"], num_groups=G, name="gn_a"),
              helper.make_node("Sigmoid", ["gn"], ["sg"]), helper.make_node("Mul", ["gn", "sg"], ["y"])]
    shape = ["N", "C" if dynamic_c else C, 5]
    outputs = [helper.make_tensor_value_info("y", dtype, shape)]
    if second_consumer:
        outputs.append(helper.make_tensor_value_info("gn", dtype, shape))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _run(model, feed):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.mark.parametrize("via", [None, "identity", "cast", "unsqueeze"])
def test_weights_through_identity_cast_unsqueeze_fuse_with_their_neighbours(via):
    model = _gn_graph(scale_via=via)
    fused, report = fuse_model_with_report(model)
    (entry,) = report.group_norms
    assert entry.status == "fused" and entry.op == "GroupNormAct" and entry.post == "silu"
    assert entry.site == "GroupNormalization 'gn_a'" and entry.num_groups == G and entry.channels == C
    assert [n.op_type for n in fused.graph.node] == ["GroupNormAct"]
    x = np.random.default_rng(0).standard_normal((3, C, 5)).astype(np.float32)
    np.testing.assert_allclose(_run(fused, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind,reason", [
    ("double", "input dtype DOUBLE is not supported"),
    ("dynamic_c", "channel count (dim 1 of 'x') is dynamic"),
    ("scale_input_opset18", "scale / bias are per group (opset < 21) and not constant"),
])
def test_unfused_group_norms_are_named_with_their_reason(kind, reason):
    model = {"double": lambda: _gn_graph(dtype=TensorProto.DOUBLE),
             "dynamic_c": lambda: _gn_graph(dynamic_c=True),
             "scale_input_opset18": lambda: _gn_graph(opset=18, scale_input=True)}[kind]()
    fused, report = fuse_model_with_report(model)
    (entry,) = report.group_norms
    assert entry.status == "unfused" and reason in entry.reason, entry.reason
    assert report.summary() == "fused 0 of 1 GroupNorms into 0 node(s)"
    assert not any(n.domain == "fusedops" for n in fused.graph.node)


def test_second_consumer_stops_the_chain_and_the_report_says_where():
    fused, report = fuse_model_with_report(_gn_graph(second_consumer=True))
    (entry,) = report.group_norms
    assert entry.status == "fused" and entry.post == ""  # gn is a graph output: silu cannot be absorbed
    assert sorted(entry.after) == ["Mul", "Sigmoid"]


def test_torch_pattern_with_a_second_consumer_is_reported():
    """torch's decomposition (Reshape → InstanceNormalization → Reshape) whose InstanceNormalization output is also
    a graph output cannot be replaced; the report names the value."""
    inits = [helper.make_tensor("s1", TensorProto.INT64, [3], [0, G, -1]),
             helper.make_tensor("ones", TensorProto.FLOAT, [G], [1.0] * G),
             helper.make_tensor("zeros", TensorProto.FLOAT, [G], [0.0] * G)]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]),
             helper.make_node("InstanceNormalization", ["r1", "ones", "zeros"], ["inorm"], name="in0"),
             helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("Reshape", ["inorm", "sx"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", C, 4]),
                               helper.make_tensor_value_info("inorm", TensorProto.FLOAT, ["N", G, 4 * C // G])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    _, report = fuse_model_with_report(model)
    (entry,) = report.group_norms
    assert entry.site == "InstanceNormalization 'in0' (torch GroupNorm)" and entry.status == "unfused"
    assert "'inorm'" in entry.reason and "graph output" in entry.reason


def test_cli_report_and_strict(tmp_path, capsys):
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_gn_graph(), str(good))
    onnx.save(_gn_graph(dtype=TensorProto.DOUBLE), str(bad))
    rc = cli.main(["fuse", str(good), str(tmp_path / "g.onnx"), "--report", str(tmp_path / "g.json"), "--strict"])
    out = capsys.readouterr()
    assert rc == 0 and "fused 1 of 1 GroupNorms into 1 node(s) (GroupNormAct x1); wrote" in out.out
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["fused"] == 1 and data["unfused"] == 0 and data["group_norms"][0]["post"] == "silu"
    rc = cli.main(["fuse", str(bad), str(tmp_path / "b.onnx"), "--report", str(tmp_path / "b.json")])
    out = capsys.readouterr()
    assert rc == 0 and "fusedops: warning: GroupNormalization 'gn_a' left unfused: input dtype DOUBLE" in out.err
    rc = cli.main(["fuse", str(bad), str(tmp_path / "b2.onnx"), "--strict"])
    out = capsys.readouterr()
    assert rc == 1 and "--strict: 1 GroupNorm(s) left unfused" in out.err
    assert (tmp_path / "b2.onnx").exists()  # the output is still written
    assert json.loads((tmp_path / "b.json").read_text())["group_norms"][0]["reason"].startswith("input dtype")
    rc = cli.main(["fuse", str(good), str(tmp_path / "g3.onnx"), "--report", str(good)])
    assert rc == 2 and "good.onnx' is the input file; refusing to overwrite the input" in capsys.readouterr().err


def test_api_returns_the_report(tmp_path):
    import fusedops

    src = tmp_path / "m.onnx"
    onnx.save(_gn_graph(scale_via="cast"), str(src))
    result = fusedops.fuse(str(src), str(tmp_path / "f.onnx"))
    assert result.path == tmp_path / "f.onnx" and onnx.load(str(result)).graph.node[0].op_type == "GroupNormAct"
    assert result.report.to_dict()["by_op"] == {"GroupNormAct": 1} and result.data_path is None
