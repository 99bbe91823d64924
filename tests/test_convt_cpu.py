"""ConvTransposeGroupNormAct's CPU kernel (plugins/csrc/core/cpu_convt.cpp) through CPU plans, against float64
(issue 13): fresh random inputs, NaN-poisoned outputs, ONNX ConvTranspose attributes the fused op takes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog
from native_support import require_native_build

require_native_build()

from fusedops.plugins import convt_abi  # noqa: E402

CASES = {
    "model4_like": dict(shape=(2, 16, 9, 11), w_shape=(16, 16, 3, 3), G=8),
    "stride2_pad_outpad": dict(shape=(3, 8, 5, 6), w_shape=(8, 12, 3, 3), G=6, strides=[2, 2], pads=[1, 1, 1, 1],
                               output_padding=[1, 1]),
    "stride3_kernel2": dict(shape=(1, 4, 5, 7), w_shape=(4, 8, 2, 2), G=4, strides=[3, 2]),
    "dilation2": dict(shape=(2, 6, 6, 7), w_shape=(6, 10, 3, 3), G=5, dilations=[2, 2], pads=[2, 2, 2, 2]),
    "groups2_odd_channels": dict(shape=(2, 6, 5, 4), w_shape=(6, 5, 3, 3), G=5, group=2),
    "one_group": dict(shape=(2, 5, 4, 19), w_shape=(5, 21, 3, 3), G=1),
    "one_channel_a_group": dict(shape=(2, 4, 4, 5), w_shape=(4, 6, 3, 3), G=6),
    "one_d": dict(shape=(3, 5, 40), w_shape=(5, 8, 5), G=4, strides=[2], pads=[2, 2], output_padding=[1]),
    "post_chain_extras": dict(shape=(2, 8, 5, 5), w_shape=(8, 8, 3, 3), G=4, pre="add(@0);gelu", post="mul(@1);relu",
                              n_extra=2),
    "no_bias": dict(shape=(2, 8, 6, 6), w_shape=(8, 8, 1, 1), G=4, pre="", bias=False),
    "reduce_min": dict(shape=(2, 8, 5, 5), w_shape=(8, 8, 3, 3), G=4, reduce="min"),
}


def _run(shape, w_shape, G, *, pre="gelu", post="", reduce="", strides=None, pads=None, output_padding=None,
         dilations=None, group=1, dtype=torch.float32, n_extra=0, bias=True, seed=0, nan_at=None):
    r = len(shape) - 2
    conv = dict(strides=strides or [1] * r, pads=pads or [0] * (2 * r), output_padding=output_padding or [0] * r,
                dilations=dilations or [1] * r, group=group)
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g) * 1.5 + 0.2).to(dtype)
    if nan_at is not None:
        x[nan_at] = float("nan")
    w = (torch.randn(*w_shape, generator=g) / (w_shape[0] * w_shape[2]) ** 0.5).to(dtype)
    C = w_shape[1] * group
    b = torch.randn(C, generator=g) * 0.3 if bias else None
    gamma, beta = torch.rand(C, generator=g) + 0.5, torch.randn(C, generator=g) * 0.5
    extras = [torch.randn(C, generator=g) for _ in range(n_extra)]
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": G, "pre": pre, "post": post, "reduce": reduce})
    fn = F.conv_transpose1d if r == 1 else F.conv_transpose2d
    d = lambda t: None if t is None else t.double()  # noqa: E731
    ref_conv = fn(d(x), d(w), d(b), stride=conv["strides"], padding=conv["pads"][:r],
                  output_padding=conv["output_padding"], dilation=conv["dilations"], groups=group)
    want = catalog.group_norm_act_reference(ref_conv, d(gamma), d(beta), [d(e) for e in extras], a)
    out = torch.full(tuple(want.shape), float("nan"), dtype=dtype)
    got = convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, extras, a, out=out, **conv)
    assert got is out
    return got, want


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_against_float64(name):
    got, want = _run(**CASES[name])
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4, equal_nan=False)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 6e-2), (torch.float16, 8e-3)])
def test_16bit_against_float64(dtype, tol):
    got, want = _run(**CASES["stride2_pad_outpad"], dtype=dtype)
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_nan_in_x_makes_exactly_its_sample_nan():
    got, want = _run(**CASES["model4_like"], nan_at=(1, 3, 4, 5))
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.isnan(got[1]).all()
    assert not torch.isnan(got[0]).any()
