"""softsign, the step added through the op spec alone (an ops.toml entry, its REFERENCE line, the regenerated files):
both chain parsers accept it, its reference is softsign in float64, and the fuser turns what torch exports for
nn.Softsign (and the ONNX Softsign op) into a fused node whose runs agree with eager PyTorch. Its kernels, function
bodies and PyTorch op are checked against the reference with every other step in tests/test_every_step.py (CPU) and
tests/gpu/test_every_step_gpu.py (CUDA)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

from fusedops import catalog
from fusedops.errors import FusedopsError

ort = pytest.importorskip("onnxruntime")
CPU = ["CPUExecutionProvider"]


def test_catalog_parses_softsign_with_its_spec_code():
    steps = catalog.parse_chain(" softsign ; add(@0);softsign()")
    assert [(s.name, s.kind.code, s.params) for s in steps] == [("softsign", 19, ()), ("add", 1, ()),
                                                                 ("softsign", 19, ())]
    with pytest.raises(catalog.CatalogError, match=r"step 'softsign' takes at most 0 parameter\(s\), got 1"):
        catalog.parse_chain("softsign(1)")


def test_native_parser_accepts_softsign_and_rejects_it_with_the_catalogs_message():
    from fusedops.plugins import abi

    ch = abi.parse_chain("relu;softsign")
    assert [(ch.steps[i].op, ch.steps[i].operand) for i in range(ch.num_steps)] == [(7, -1), (19, -1)]
    with pytest.raises(catalog.CatalogError) as want:
        catalog.parse_chain("softsign(2)")
    with pytest.raises(FusedopsError) as got:
        abi.parse_chain("softsign(2)")
    assert str(want.value) in str(got.value)
    with pytest.raises(FusedopsError, match="softsign"):  # the list of known steps names it
        abi.parse_chain("softsine")


def test_reference_is_softsign_in_float64():
    """Against sign(x) (1 - 1 / (1 + |x|)), another form of x / (1 + |x|), on random and extreme values."""
    g = torch.Generator().manual_seed(19)
    x = torch.cat([torch.randn(5000, generator=g, dtype=torch.float64) * 4,
                   torch.tensor([0.0, -0.0, 1e-300, -1e-300, 1e300, -1e300, 3.0, -3.0], dtype=torch.float64)])
    want = torch.tensor([math.copysign(1.0 - 1.0 / (1.0 + abs(v)), v) for v in x.tolist()], dtype=torch.float64)
    got = catalog.STEP_KINDS["softsign"].fn(x)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)  # the second form cancels for small |x|
    assert torch.isnan(catalog.STEP_KINDS["softsign"].fn(torch.tensor([math.nan], dtype=torch.float64))).all()


# ---------------------------------------------------------------------------------------------------------------------
# The fuser on torch exports and on the ONNX Softsign op
# ---------------------------------------------------------------------------------------------------------------------

class _GroupNormSoftsign(torch.nn.Module):
    def __init__(self, channels: int, groups: int, linear_in: int | None = None):
        super().__init__()
        self.linear = torch.nn.Linear(linear_in, channels) if linear_in else None
        self.pre = torch.nn.Softsign() if not linear_in else torch.nn.Identity()
        self.gn = torch.nn.GroupNorm(groups, channels)
        self.post = torch.nn.Softsign()
        with torch.no_grad():  # fresh, non-trivial affine parameters (the defaults are ones and zeros)
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        if self.linear is not None:
            x = self.linear(x)
        return self.post(self.gn(self.pre(x)))


def _run(model: onnx.ModelProto, x: np.ndarray, library: bool = False) -> np.ndarray:
    if library:
        from fusedops import ort as fo

        reason = fo.unavailable_reason()
        if reason:
            pytest.skip(f"the fusedops ONNX Runtime library is not usable here: {reason}")
        sess = fo.session(model, providers=CPU)
    else:
        sess = ort.InferenceSession(model.SerializeToString(), providers=CPU)
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _fused_node(model: onnx.ModelProto) -> onnx.NodeProto:
    assert [n.op_type for n in model.graph.node] in (["GroupNormAct"], ["GemmGroupNormAct"]), \
        [n.op_type for n in model.graph.node]
    return model.graph.node[0]


def _chains(node: onnx.NodeProto) -> tuple[str, str]:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return attrs["pre"].decode(), attrs["post"].decode()


@pytest.mark.parametrize("kind", ["conv_like", "linear"])
def test_torch_softsign_exports_fuse_and_match_eager(kind):
    from fusedops.exporter import fuse_model
    from fusedops.exporter.export import export_module

    with torch.random.fork_rng():  # seeds the module's parameters without touching other tests' global RNG
        torch.manual_seed(14)
        if kind == "linear":
            module, x = _GroupNormSoftsign(12, 3, linear_in=10).eval(), torch.randn(5, 10)
        else:
            module, x = _GroupNormSoftsign(12, 4).eval(), torch.randn(3, 12, 6, 5) * 2 + 0.3
    unfused = export_module(module, x)
    assert "Abs" in {n.op_type for n in unfused.graph.node}  # torch writes x / (1 + |x|), not Softsign
    fused = fuse_model(unfused)
    node = _fused_node(fused)
    assert _chains(node) == (("", "softsign") if kind == "linear" else ("softsign", "softsign"))
    with torch.no_grad():
        eager = module(x).double().numpy()
    for library in (False, True):  # function bodies on plain ONNX Runtime, then libfusedops_ort
        np.testing.assert_allclose(_run(fused, x.numpy(), library), eager, rtol=1e-5, atol=1e-5,
                                   err_msg=f"fused {kind}, library={library}")


@pytest.mark.parametrize("form", ["Softsign", "Div(x, Add(Abs(x), 1))"])
def test_onnx_softsign_forms_fuse(form):
    """The spec's onnx_op (Softsign) and the formula's expansion with Add's operands the other way round."""
    from fusedops.exporter import fuse_model
    from fusedops.exporter.export import OUTPUT_NAME, export_module

    with torch.random.fork_rng():
        torch.manual_seed(3)
        gn = torch.nn.GroupNorm(2, 6)
        with torch.no_grad():
            gn.weight.uniform_(0.5, 1.5)
            gn.bias.uniform_(-0.5, 0.5)
        x = torch.randn(4, 6, 7)
    model = export_module(gn, x)
    last = next(n for n in model.graph.node if OUTPUT_NAME in n.output)
    last.output[list(last.output).index(OUTPUT_NAME)] = "gn_out"
    if form == "Softsign":
        model.graph.node.append(helper.make_node("Softsign", ["gn_out"], [OUTPUT_NAME]))
    else:
        one = onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one")
        model.graph.initializer.append(one)
        model.graph.node.extend([helper.make_node("Abs", ["gn_out"], ["abs_out"]),
                                 helper.make_node("Add", ["abs_out", "one"], ["den"]),
                                 helper.make_node("Div", ["gn_out", "den"], [OUTPUT_NAME])])
    onnx.checker.check_model(model)
    fused = fuse_model(model)
    assert _chains(_fused_node(fused)) == ("", "softsign")
    np.testing.assert_allclose(_run(fused, x.numpy()), _run(model, x.numpy()), rtol=1e-5, atol=1e-5)


def test_a_different_constant_is_not_softsign():
    """x / (2 + |x|) is not softsign: the formula pattern checks its literals, so nothing is fused into the chain."""
    from fusedops.exporter import fuse_model
    from fusedops.exporter.export import export_module

    class Almost(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gn = torch.nn.GroupNorm(2, 4)

        def forward(self, x):
            y = self.gn(x)
            return y / (2 + y.abs())

    fused = fuse_model(export_module(Almost().eval(), torch.randn(2, 4, 3)))
    gn_nodes = [n for n in fused.graph.node if n.op_type == "GroupNormAct"]
    assert len(gn_nodes) == 1 and _chains(gn_nodes[0])[1] == ""
    assert "Abs" in {n.op_type for n in fused.graph.node}
