"""The opt-in ConvTranspose fold (``fuse_model(..., convtranspose=True)``): model 4 (ConvTranspose2d → GELU →
GroupNorm) exported by torch becomes one ConvTransposeGroupNormAct node whose function body, run by onnxruntime on the
CPU without the fusedops library, equals eager PyTorch and the float64 reference. Without the option the fuser's
output is what it was: the ConvTranspose kept, a GroupNormAct after it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from fusedops import catalog
from fusedops.exporter import export_module, fuse_model, fuse_model_with_report
from fusedops.models import convtranspose2d_gelu_groupnorm as model4

OP = catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name
# Measured (onnxruntime 1.31 CPU): body vs float32 eager 1.9e-6, body vs float64 1.5e-6 (eager itself is 1.9e-6
# off float64) on outputs up to |y| ~ 5.3; 1e-5 is ~5x the worst and far below what a wiring error gives.
TOL = 1e-5


@pytest.fixture(scope="module")
def exported():
    torch.manual_seed(0)
    m = model4.Model(8, 8, 3, 1, 4, 4).eval()
    with torch.no_grad():  # non-trivial affine parameters, so gamma / beta wiring is checked
        m.group_norm.weight.uniform_(0.5, 1.5)
        m.group_norm.bias.uniform_(-0.5, 0.5)
    x = torch.rand(2, 8, 12, 12)
    return m, x, export_module(m, x)


def _run(model: onnx.ModelProto, x: torch.Tensor) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]


def test_default_keeps_the_convtranspose(exported):
    _, _, model = exported
    default = fuse_model(model)
    assert fuse_model(model, convtranspose=False).SerializeToString() == default.SerializeToString()
    ops = [(n.domain, n.op_type) for n in default.graph.node]
    assert ("", "ConvTranspose") in ops and (catalog.DOMAIN, "GroupNormAct") in ops
    assert not any(op == OP for _, op in ops)


def test_opt_in_folds_into_one_node_equal_to_eager_and_float64(exported):
    m, x, model = exported
    fused, report = fuse_model_with_report(model, convtranspose=True)
    nodes = [n for n in fused.graph.node if n.op_type not in ("Constant",)]
    assert [(n.domain, n.op_type) for n in nodes] == [(catalog.DOMAIN, OP)], [n.op_type for n in nodes]
    node = nodes[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["pre"] == b"gelu" and attrs["num_groups"] == 4
    assert attrs["kernel_shape"] == [3, 3] and attrs["strides"] == [1, 1] and attrs["pads"] == [0, 0, 0, 0]
    assert report.to_dict()["by_op"] == {OP: 1} and "notes" not in report.to_dict()
    assert f"({OP} x1)" in report.summary()

    got = _run(fused, x)
    with torch.no_grad():
        eager = m(x).numpy()
    np.testing.assert_allclose(got, eager, rtol=TOL, atol=TOL)
    ct, gn = m.conv_transpose, m.group_norm
    a = catalog.parse_attrs(OP, {"num_groups": 4, "pre": "gelu", "epsilon": gn.eps})
    with torch.no_grad():
        want = catalog.convtranspose_group_norm_act_reference(
            x.double(), ct.weight.double(), ct.bias.double(), gn.weight.double(), gn.bias.double(), [], a)
    np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=TOL, atol=TOL)


def test_a_convtranspose_with_output_shape_is_left_and_the_report_says_why(exported):
    _, x, model = exported
    m2 = onnx.ModelProto()
    m2.CopyFrom(model)
    conv = next(n for n in m2.graph.node if n.op_type == "ConvTranspose")
    conv.attribute.append(onnx.helper.make_attribute("output_shape", [14, 14]))
    fused, report = fuse_model_with_report(m2, convtranspose=True)
    assert any(n.op_type == "ConvTranspose" for n in fused.graph.node)
    assert any(n.op_type == "GroupNormAct" for n in fused.graph.node)
    (note,) = report.to_dict()["notes"]
    assert "not folded: output_shape is given" in note


class _ConvTranspose3dGeluGroupNorm(torch.nn.Module):
    """The 3-D variant of model 4 (KernelBench has ConvTranspose3d + GroupNorm problems)."""

    def __init__(self):
        super().__init__()
        self.conv_transpose = torch.nn.ConvTranspose3d(4, 8, 3, stride=2, padding=1)
        self.group_norm = torch.nn.GroupNorm(4, 8)

    def forward(self, x):
        return self.group_norm(torch.nn.functional.gelu(self.conv_transpose(x)))


def test_a_3d_convtranspose_falls_back_to_groupnormact_equal_to_eager():
    """No kernel of the fused op takes 3-D convolutions: with the option on, the ConvTranspose stays, GELU + GroupNorm
    still become one GroupNormAct, the report names the reason, and the model still equals eager."""
    torch.manual_seed(1)
    m = _ConvTranspose3dGeluGroupNorm().eval()
    with torch.no_grad():
        m.group_norm.weight.uniform_(0.5, 1.5)
        m.group_norm.bias.uniform_(-0.5, 0.5)
    x = torch.rand(2, 4, 3, 5, 4)
    fused, report = fuse_model_with_report(export_module(m, x), convtranspose=True)
    ops = [(n.domain, n.op_type) for n in fused.graph.node if n.op_type != "Constant"]
    assert ("", "ConvTranspose") in ops and (catalog.DOMAIN, "GroupNormAct") in ops and len(ops) == 2, ops
    node = next(n for n in fused.graph.node if n.op_type == "GroupNormAct")
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}["pre"] == b"gelu"
    (note,) = report.to_dict()["notes"]
    assert "not folded: only 1-D and 2-D transposed convolutions are fused" in note
    with torch.no_grad():
        eager = m(x).numpy()
    np.testing.assert_allclose(_run(fused, x), eager, rtol=TOL, atol=TOL)
