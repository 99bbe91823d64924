"""ConvTransposeGroupNormAct's catalog side: its attributes (ONNX ConvTranspose's, checked with messages naming the
attribute) and its float64-capable PyTorch reference, against eager PyTorch (model 4's structure) and against the
library's CPU plan (plugins/convt_abi.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusedops import catalog
from fusedops.models import convtranspose2d_gelu_groupnorm as model4

OP = catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name


def _attrs(**kw):
    return catalog.parse_attrs(OP, {"num_groups": kw.pop("num_groups", 4), **kw})


def test_model4_structure_against_eager_pytorch_in_float64():
    torch.manual_seed(0)
    eager = model4.Model(8, 8, 3, 1, 4, 4).double().eval()
    with torch.no_grad():
        eager.group_norm.weight.uniform_(0.5, 1.5)
        eager.group_norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 8, 12, 12, dtype=torch.float64)
    ct, gn = eager.conv_transpose, eager.group_norm
    a = _attrs(pre="gelu", epsilon=gn.eps)
    got = catalog.convtranspose_group_norm_act_reference(x, ct.weight, ct.bias, gn.weight, gn.bias, [], a)
    with torch.no_grad():
        want = eager(x)
    assert got.dtype == torch.float64 and got.shape == want.shape == (2, 8, 14, 14)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pads, output_padding", [([1, 1, 1, 1], [1, 1]), ([2, 0, 1, 3], [0, 1]), ([0, 0, 0, 0],
                                                                                                   [1, 0])])
def test_onnx_pads_begin_and_end_against_torch_padding(pads, output_padding):
    """ONNX's asymmetric pads: torch with the symmetric part of the padding, then the rest cropped by hand."""
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 4, 5, 6, generator=g, dtype=torch.float64), torch.randn(4, 3, 3, 3, generator=g,
                                                                                   dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    conv = _attrs(num_groups=3, strides=[2, 2], pads=pads, output_padding=output_padding, group=2).conv
    got = catalog.conv_transpose(x, w, b, conv)
    sym = [min(pads[0], pads[2]), min(pads[1], pads[3])]
    full = F.conv_transpose2d(x, w, b, stride=2, padding=sym, output_padding=output_padding, groups=2)
    crop = full[:, :, pads[0] - sym[0]:full.shape[2] - (pads[2] - sym[0]),
                pads[1] - sym[1]:full.shape[3] - (pads[3] - sym[1])]
    assert got.shape == crop.shape == (2, 6, *conv.output_size((5, 6), (3, 3)))
    torch.testing.assert_close(got, crop, rtol=0, atol=0)


def test_one_d_dilations_and_groups_against_nn_convtranspose1d():
    torch.manual_seed(2)
    ct = nn.ConvTranspose1d(6, 4, 5, stride=3, padding=2, output_padding=1, groups=2, dilation=2).double()
    x = torch.randn(3, 6, 9, dtype=torch.float64)
    conv = _attrs(num_groups=2, strides=[3], pads=[2, 2], output_padding=[1], dilations=[2], group=2,
                  kernel_shape=[5]).conv
    with torch.no_grad():
        torch.testing.assert_close(catalog.conv_transpose(x, ct.weight, ct.bias, conv), ct(x), rtol=0, atol=0)


def test_reference_against_the_library_cpu_plan():
    from native_support import built_abi

    built_abi("the CPU ConvTransposeGroupNormAct")
    from fusedops.plugins import convt_abi

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 5, 6, generator=g)
    w = torch.randn(4, 3, 3, 3, generator=g) / 6
    b, gamma, beta = torch.randn(6, generator=g), torch.rand(6, generator=g) + 0.5, torch.randn(6, generator=g)
    extra = torch.randn(6, generator=g)
    a = _attrs(num_groups=3, strides=[2, 2], pads=[1, 0, 1, 2], output_padding=[1, 1], group=2, pre="gelu",
               post="mul(@0);relu")
    c = a.conv
    got = convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [extra], a, strides=c.strides, pads=c.pads,
                                                output_padding=c.output_padding, group=c.group)
    d = [t.double() for t in (x, w, b, gamma, beta, extra)]
    want = catalog.convtranspose_group_norm_act_reference(*d[:5], d[5:], a)
    assert got.shape == want.shape == catalog.output_shape(OP, (2, 4, 5, 6), a, (4, 3, 3, 3))
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)  # float32 kernel, as test_convt_cpu.py


def test_attributes_written_on_a_node():
    a = _attrs(strides=[2, 2], pads=[1, 1, 1, 1], group=2)
    d = a.onnx_attrs(OP)
    assert list(d) == [n for n in (x.name for x in catalog.CONVTRANSPOSE_GROUP_NORM_ACT.attrs) if n in d]
    assert d["strides"] == [2, 2] and d["group"] == 2 and d["allow_tf32"] == 1
    assert "dilations" not in d  # an empty list is ONNX's default: left off (onnxruntime rejects an empty INTS)
    assert catalog.parse_attrs(OP, d) == a


@pytest.mark.parametrize("attrs, message", [
    ({"strides": [0, 1]}, "attribute 'strides' has 0"),
    ({"pads": [1, 1, 1]}, "attribute 'pads' has 3 values; it takes 2 per spatial dim"),
    ({"strides": [1, 1, 1]}, "attribute 'strides' has 3 values"),
    ({"strides": [2], "dilations": [1, 1]}, "attribute 'dilations' is for 2 spatial dim(s), the other lists for 1"),
    ({"output_padding": [1, 0]}, "output_padding[0] = 1 must be < max(stride, dilation) = 1"),
    ({"group": 0}, "group must be in 1..2147483647"),
    ({"group": 1.0}, "attribute 'group' must be an INT"),
    ({"kernel_shape": "3,3"}, "attribute 'kernel_shape' must be an INTS"),
    ({"kernel_shape": [3, True]}, "attribute 'kernel_shape' must be an INTS"),
    ({"trans_b": 1}, "unknown attribute 'trans_b'"),
])
def test_bad_conv_attributes_are_named(attrs, message):
    with pytest.raises(catalog.CatalogError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        _attrs(**attrs)


def test_other_ops_do_not_take_conv_attributes():
    with pytest.raises(catalog.CatalogError, match="GroupNormAct: unknown attribute 'strides'"):
        catalog.parse_attrs("GroupNormAct", {"num_groups": 2, "strides": [1, 1]})


def test_reference_names_bad_shapes():
    a = _attrs(num_groups=2)
    x, w = torch.randn(1, 4, 5, 5), torch.randn(3, 2, 3, 3)
    with pytest.raises(catalog.CatalogError, match=r"W of shape \(3, 2, 3, 3\) must be \(Cin=4"):
        catalog.convtranspose_group_norm_act_reference(x, w, None, torch.ones(2), torch.zeros(2), [], a)
    with pytest.raises(catalog.CatalogError, match="pads crop all of it"):
        catalog.conv_transpose(torch.randn(1, 2, 1, 1), torch.randn(2, 2, 1, 1), None,
                               _attrs(num_groups=2, pads=[1, 1, 0, 0]).conv)
