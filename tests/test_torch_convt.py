"""The PyTorch op fusedops::convtranspose_group_norm_act on the CPU (issue 13): against an independent float64
reference (torch's conv_transpose + GELU + group_norm, ONNX pads applied by cropping), the catalog's reference for
chains and reductions, autograd, opcheck, torch.compile, plan keying and clear errors."""

from __future__ import annotations

import zlib

import pytest
import torch
import torch.nn.functional as F

from fusedops.errors import FusedopsError

try:
    from fusedops.plugins import torch_convt, torch_ops

    torch_ops.load()
    SKIP = None
except FusedopsError as e:  # the PyTorch ops library is not built here
    SKIP = str(e)

pytestmark = pytest.mark.skipif(SKIP is not None, reason=f"PyTorch ops not built: {SKIP}")

# float32 kernel against float64: the worst error measured over these cases was 1.2e-6 (2026-11-24, development VM)
ATOL = 1e-5


def _gen(case: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(case.encode()))


def _tensors(case, n, cin, cout, spatial, kernel, group=1, bias=True):
    g = _gen(case)
    x = torch.randn(n, cin, *spatial, generator=g)
    w = torch.randn(cin, cout // group, *kernel, generator=g) * 0.3
    b = torch.randn(cout, generator=g) if bias else None
    gamma, beta = torch.rand(cout, generator=g) + 0.5, torch.randn(cout, generator=g)
    return x, w, b, gamma, beta


def _independent(x, w, b, gamma, beta, num_groups, strides, pads, output_padding, dilations, group, pre_gelu):
    """float64: torch's transposed convolution without padding, then ONNX's begin / end pads cropped off."""
    r = x.dim() - 2
    conv = F.conv_transpose1d if r == 1 else F.conv_transpose2d
    z = conv(x.double(), w.double(), None if b is None else b.double(), stride=strides or 1,
             output_padding=output_padding or 0, dilation=dilations or 1, groups=group)
    pads = pads or [0] * (2 * r)
    z = z[(slice(None), slice(None), *[slice(pads[i], z.shape[2 + i] - pads[r + i]) for i in range(r)])]
    if pre_gelu:
        z = F.gelu(z)
    return F.group_norm(z, num_groups, gamma.double(), beta.double(), 1e-5)


CASES = {  # name: n, cin, cout, spatial, kernel, groups, strides, pads, output_padding, dilations, conv group, bias
    "model4_like": (2, 8, 8, (12, 12), (3, 3), 4, [], [], [], [], 1, True),
    "stride2_pads_outpad": (3, 6, 4, (7, 9), (3, 3), 2, [2, 2], [1, 0, 1, 2], [1, 1], [], 1, True),
    "dilation_group2": (2, 4, 6, (5, 6), (3, 2), 3, [1, 2], [0, 1, 1, 0], [], [2, 1], 2, True),
    "no_bias": (1, 5, 8, (9, 4), (2, 3), 8, [], [], [], [], 1, False),
    "one_group_1d": (4, 3, 10, (17,), (4,), 1, [3], [2, 1], [2], [], 1, True),
    "one_channel_a_group": (2, 4, 4, (6, 6), (1, 1), 4, [], [], [], [], 1, True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_equals_independent_float64_reference(name):
    n, cin, cout, spatial, kernel, groups, s, p, op, d, grp, bias = CASES[name]
    x, w, b, gamma, beta = _tensors(name, n, cin, cout, spatial, kernel, grp, bias)
    y = torch_ops.convtranspose_group_norm_act(x, w, b, gamma, beta, [], groups, s, p, op, d, grp, pre="gelu")
    want = _independent(x, w, b, gamma, beta, groups, s, p, op, d, grp, pre_gelu=True)
    assert y.dtype == torch.float32 and y.shape == want.shape
    torch.testing.assert_close(y.double(), want, atol=ATOL, rtol=0)
    y64 = torch_ops.convtranspose_group_norm_act(x.double(), w.double(), None if b is None else b.double(),
                                                 gamma.double(), beta.double(), [], groups, s, p, op, d, grp,
                                                 pre="gelu")
    torch.testing.assert_close(y64, want, atol=1e-10, rtol=0)  # float64 goes to the catalog's reference


def test_channels_last_input_gives_the_same_result():
    """A channels_last X (PyTorch's memory format for NHWC) and a non-contiguous W: the op reads them by their strides
    (it makes them contiguous first: the kernels index NCHW), so the values equal the NCHW call's bit for bit."""
    x, w, b, gamma, beta = _tensors("channels_last", 2, 8, 8, (7, 9), (3, 3))
    x_cl = x.to(memory_format=torch.channels_last)
    w_t = w.transpose(2, 3).contiguous().transpose(2, 3)  # same values, other strides
    assert not x_cl.is_contiguous() and not w_t.is_contiguous()
    y = torch_ops.convtranspose_group_norm_act(x_cl, w_t, b, gamma, beta, [], 4, [2, 1], [1, 0, 0, 1], pre="gelu")
    y_ref = torch_ops.convtranspose_group_norm_act(x, w, b, gamma, beta, [], 4, [2, 1], [1, 0, 0, 1], pre="gelu")
    assert torch.equal(y, y_ref)
    want = _independent(x, w, b, gamma, beta, 4, [2, 1], [1, 0, 0, 1], [], [], 1, pre_gelu=True)
    torch.testing.assert_close(y.double(), want, atol=ATOL, rtol=0)


def test_chains_extras_and_reduce_follow_the_catalog_reference():
    from fusedops import catalog

    x, w, b, gamma, beta = _tensors("chains", 2, 4, 8, (5, 5), (3, 3))
    extra = torch.randn(8, generator=_gen("extra"))
    kw = dict(strides=[2, 1], pads=[1, 1, 0, 0], pre="add(@0);silu", post="leaky_relu(0.1);mul(2)", reduce="max")
    y = torch_ops.convtranspose_group_norm_act(x, w, b, gamma, beta, [extra], 4, **kw)
    a = torch_convt.parsed_attrs(4, (2, 1), (1, 1, 0, 0), (), (), 1, 1e-5, kw["pre"], kw["post"], "max", 1)
    want = catalog.convtranspose_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(),
                                                          beta.double(), [extra.double()], a)
    assert y.shape == (2, 1, 10, 6)  # H: 2 * 4 + 3 - 1 - 0, W: 1 * 4 + 3 - 1 - 0 (pads: begins 1, 1; ends 0, 0)
    torch.testing.assert_close(y.double(), want, atol=ATOL, rtol=0)


def test_plans_are_keyed_by_the_convolution_attributes():
    """Same tensors, two stride / pad settings, one process: each gets its own plan and its own right answer."""
    x, w, b, gamma, beta = _tensors("keying", 2, 4, 4, (6, 6), (3, 3))
    for s, p in (([1, 1], [0, 0, 0, 0]), ([2, 2], [1, 1, 1, 1]), ([1, 1], [0, 0, 0, 0])):
        y = torch_ops.convtranspose_group_norm_act(x, w, b, gamma, beta, [], 2, s, p)
        want = _independent(x, w, b, gamma, beta, 2, s, p, [], [], 1, pre_gelu=False)
        torch.testing.assert_close(y.double(), want, atol=ATOL, rtol=0)


def test_opcheck_with_and_without_bias():
    x, w, b, gamma, beta = _tensors("opcheck", 2, 4, 6, (5, 4), (3, 3), group=2)
    op = torch.ops.fusedops.convtranspose_group_norm_act.default
    torch.library.opcheck(op, (x, w, b, gamma, beta, [], 3, [2, 1], [1, 0, 0, 1], [1, 0], [], 2, 1e-5, "gelu", "",
                               "", -1))
    torch.library.opcheck(op, (x, w, None, gamma, beta, [], 3, [], [], [], [], 2))


def test_gradients_match_finite_differences():
    x, w, b, gamma, beta = _tensors("grad", 1, 2, 4, (3, 3), (2, 2))
    args = [t.double().requires_grad_() for t in (x, w, b, gamma, beta)]
    torch.autograd.gradcheck(
        lambda *t: torch_ops.convtranspose_group_norm_act(*t, [], 2, [2, 2], [1, 0, 0, 1], pre="gelu"), args)


def test_torch_compile_traces_through():
    x, w, b, gamma, beta = _tensors("compile", 2, 4, 4, (6, 6), (3, 3))
    f = torch.compile(lambda x_: torch_ops.convtranspose_group_norm_act(x_, w, b, gamma, beta, [], 2, pre="gelu"),
                      fullgraph=True)
    want = torch_ops.convtranspose_group_norm_act(x, w, b, gamma, beta, [], 2, pre="gelu")
    torch.testing.assert_close(f(x), want, atol=0, rtol=0)


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_groups=3), "not divisible by num_groups=3"),
    (dict(strides=[0, 1]), "'strides' value 0"),
    (dict(pads=[1, 1, 1]), "pads"),
    (dict(group=3), "group"),
    (dict(output_padding=[2, 0]), "output_padding"),
])
def test_bad_attributes_are_clear_errors(kwargs, message):
    x, w, b, gamma, beta = _tensors("bad", 1, 4, 4, (5, 5), (3, 3))
    args = dict(num_groups=2)
    args.update(kwargs)
    with pytest.raises(FusedopsError, match=message):
        torch_ops.convtranspose_group_norm_act(x, w, b, gamma, beta, [], **args)


def test_bad_shapes_are_clear_errors():
    x, w, b, gamma, beta = _tensors("badshape", 1, 4, 4, (5, 5), (3, 3))
    with pytest.raises(FusedopsError, match="bias B|B "):
        torch_ops.convtranspose_group_norm_act(x, w, b[:3], gamma, beta, [], 2)
    with pytest.raises(FusedopsError, match="W"):
        torch_ops.convtranspose_group_norm_act(x, w[:3], b, gamma, beta, [], 2)
    with pytest.raises(FusedopsError, match="dtype"):
        torch_ops.convtranspose_group_norm_act(x.int(), w, b, gamma, beta, [], 2)
