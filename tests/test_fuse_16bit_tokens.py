"""16-bit graphs and transformer-shaped GEMMs: the fuser on float16 / bfloat16 exports (and float32 GroupNorms between
Cast nodes), and on Linear of (B, T, K) + per-token GroupNorm with torch's separate and merged Reshapes. Every
model is run by ONNX Runtime's CPU EP twice, on the function bodies and with the fusedops library, and compared
with eager PyTorch in the same dtype and with a float64 reference.

Tolerances (measured 2026-11-23 on these models): the fused result is within 1 unit of the output dtype's spacing at
the output's magnitude of the float64 reference (statistics are float32, one rounding at the end), which is never
worse than eager PyTorch in that dtype (float16 eager: up to 1e-3 abs here; fused: up to 5e-4), so the bounds are
``max(2 * eager error, 1 ulp)``.
"""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from fusedops import catalog
from fusedops import ort as fo
from fusedops.exporter import fuse_model_with_report
from fusedops.exporter.export import export_module

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SPACING = {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
LIB_REASON = fo.unavailable_reason()


class GnSiluConv(torch.nn.Module):
    """The Stable-Diffusion ResNet-block norm: GroupNorm → SiLU → Conv (the conv is left out in bfloat16: ONNX has
    no bfloat16 Conv on ORT's CPU EP)."""

    def __init__(self, conv=True):
        super().__init__()
        self.gn = torch.nn.GroupNorm(4, 16)
        self.conv = torch.nn.Conv2d(16, 8, 3, padding=1) if conv else torch.nn.Identity()

    def forward(self, x):
        return self.conv(torch.nn.functional.silu(self.gn(x)))


class UpcastGn(torch.nn.Module):
    """A 16-bit model whose GroupNorm runs in float32 between casts (what autocast-style exports write)."""

    def __init__(self):
        super().__init__()
        self.gn = torch.nn.GroupNorm(4, 16)

    def forward(self, x):
        return torch.nn.functional.silu(self.gn(x.float()).to(x.dtype))


class TokenMlp(torch.nn.Module):
    """Linear on (B, T, K) → GroupNorm of each token → SiLU; ``merged``: flatten(0, -2) / view_as instead of
    reshape(B*T, C) / reshape(B, T, C) (with a static batch torch then merges the flatten into GroupNorm's Reshape)."""

    def __init__(self, k=24, c=32, g=4, merged=False):
        super().__init__()
        self.lin, self.gn, self.merged = torch.nn.Linear(k, c), torch.nn.GroupNorm(g, c), merged

    def forward(self, x):
        y = self.lin(x)
        if self.merged:
            z = self.gn(y.flatten(0, -2)).view_as(y)
        else:
            b, t, c = y.shape
            z = self.gn(y.reshape(b * t, c)).reshape(b, t, c)
        return torch.nn.functional.silu(z)


def _to_numpy(x: torch.Tensor) -> np.ndarray:
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def _float_io(model):
    """The model with a float32 input and output around it (Cast nodes): onnxruntime's Python API cannot feed or
    return bfloat16 arrays."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    (inp,), (out,) = m.graph.input, m.graph.output
    elem = inp.type.tensor_type.elem_type
    m.graph.node.insert(0, helper.make_node("Cast", ["io_x"], [inp.name], to=elem))
    m.graph.node.append(helper.make_node("Cast", [out.name], ["io_y"], to=TensorProto.FLOAT))
    new_in = helper.make_tensor_value_info("io_x", TensorProto.FLOAT, None)
    new_in.type.tensor_type.shape.CopyFrom(inp.type.tensor_type.shape)
    new_out = helper.make_tensor_value_info("io_y", TensorProto.FLOAT, None)
    new_out.type.tensor_type.shape.CopyFrom(out.type.tensor_type.shape)
    del m.graph.input[:], m.graph.output[:]
    m.graph.input.append(new_in)
    m.graph.output.append(new_out)
    return m


def _run(model, x: torch.Tensor, library: bool) -> np.ndarray:
    if x.dtype == torch.bfloat16:
        model, x = _float_io(model), x.float()
    if library:
        sess = fo.session(model, providers=["CPUExecutionProvider"])
    else:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: _to_numpy(x)})[0].astype(np.float64)


def _check(module: torch.nn.Module, x: torch.Tensor, dtype, dynamic_batch=True, expect=None):
    """Export in ``dtype``, fuse, run; returns the report. ``expect``: (op, pre, post) of every fused node."""
    torch.manual_seed(zlib.crc32(repr((type(module).__name__, x.shape, str(dtype))).encode()))
    for p in module.parameters():  # non-trivial affine parameters
        torch.nn.init.normal_(p, mean=0.5, std=0.5)
    ref_module = module.double() if not isinstance(module, UpcastGn) else None
    with torch.no_grad():
        if ref_module is not None:
            ref = ref_module(x.double()).numpy()
        else:  # the float32 GroupNorm of UpcastGn, in float64
            ref = torch.nn.functional.silu(module.double().gn(x.double().to(dtype).double())).numpy()
        m = module.to(dtype) if not isinstance(module, UpcastGn) else module.float()
        xq = x.to(dtype)
        eager = m(xq).double().numpy()
        onnx_model = export_module(m.eval(), xq, dynamic_batch=dynamic_batch)
    fused, report = fuse_model_with_report(onnx_model)
    assert report.group_norms and not report.unfused, [(e.site, e.reason) for e in report.unfused]
    nodes = [n for n in fused.graph.node if n.domain == catalog.DOMAIN]
    assert len(nodes) == len(report.group_norms)
    if expect is not None:
        assert [(e.op, e.pre, e.post) for e in report.group_norms] == [expect] * len(nodes)
    assert all(e.dtype == {torch.float32: "FLOAT", torch.float16: "FLOAT16", torch.bfloat16: "BFLOAT16"}[dtype]
               for e in report.group_norms)
    eager_err = float(np.abs(eager - ref).max())
    ulp = SPACING[dtype] * float(np.abs(ref).max())
    tol = max(2 * eager_err, ulp, 1e-5)
    for library in (False, True):
        if library and LIB_REASON:
            continue
        y = _run(fused, xq, library)
        assert y.shape == ref.shape and np.isfinite(y).all()
        err = float(np.abs(y - ref).max())
        assert err <= tol, (library, err, eager_err, ulp)
        assert float(np.abs(y - eager).max()) <= tol + eager_err
    return report


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_resnet_block_norm_fuses_in_every_dtype(dtype):
    dt = DTYPES[dtype]
    report = _check(GnSiluConv(conv=dt != torch.bfloat16), torch.randn(3, 16, 6, 5), dt,
                    expect=("GroupNormAct", "", "silu"))
    assert report.group_norms[0].after == (["Conv"] if dt != torch.bfloat16 else [])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_float32_group_norm_between_casts_fuses_on_the_16bit_tensor(dtype):
    report = _check(UpcastGn(), torch.randn(2, 16, 4, 4), DTYPES[dtype], expect=("GroupNormAct", "", "silu"))
    assert report.group_norms[0].before is None  # X is the graph input itself: both casts were absorbed


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("merged,dynamic", [(False, True), (False, False), (True, True), (True, False)])
def test_token_mlp_becomes_one_gemm_groupnorm(dtype, merged, dynamic):
    """Linear (B, T, K) + per-token GroupNorm + SiLU → one GemmGroupNormAct on the rank-3 input (rows = B*T)."""
    report = _check(TokenMlp(merged=merged), torch.randn(3, 5, 24), DTYPES[dtype], dynamic_batch=dynamic,
                    expect=("GemmGroupNormAct", "", "silu"))
    assert report.group_norms[0].before is None and report.group_norms[0].after == []


def test_token_gemm_without_the_unflatten_keeps_rows():
    """A per-token GroupNorm whose (B*T, C) output is not reshaped back: GemmGroupNormAct of the flattened input."""

    class Rows(TokenMlp):
        def forward(self, x):
            y = self.lin(x)
            return torch.relu(self.gn(y.reshape(-1, y.shape[-1])))

    report = _check(Rows(), torch.randn(2, 7, 24), torch.float32, expect=("GemmGroupNormAct", "", "relu"))
    assert report.group_norms[0].before == "Reshape"
