"""ConvTransposeGroupNormAct descriptors at the C ABI (issue 13, in progress): plan creation checks the transposed
convolution against ONNX ConvTranspose's rules with one clear message. The CPU kernel's results are checked in
tests/test_convt_cpu.py, the CUDA kernel's in tests/gpu/test_convt_gpu.py."""

from __future__ import annotations

import pytest

from fusedops import catalog
from fusedops.errors import FusedopsError
from native_support import require_native_build

require_native_build()

from fusedops.plugins import abi, convt_abi  # noqa: E402

A = catalog.parse_attrs("GroupNormAct", {"num_groups": 4, "pre": "gelu"})


def _desc(**kw):
    return convt_abi.convtranspose_desc((2, 8, 5, 6), (8, 4, 3, 3), A, **kw)


def test_output_size_follows_onnx():
    d = convt_abi.convtranspose_desc((1, 8, 256, 9), (8, 4, 3, 3), A, strides=[1, 2], pads=[0, 1, 0, 1],
                                     output_padding=[0, 1])
    assert (d.conv.output[0], d.conv.output[1]) == (258, 18)  # 256 + 2; 2 * 8 + 1 + 2 + 1 - 1 - 1
    d = _desc(strides=[2, 3], pads=[1, 0, 1, 2], output_padding=[1, 2], dilations=[1, 2])
    assert (d.conv.output[0], d.conv.output[1]) == (10, 20)  # 2*4+1+2*2+1-1-1, 3*5+2+2*2+1-0-2
    assert d.d.gn.S == 200 and d.d.gn.C == 4 and d.d.gn.N == 2


def test_a_valid_descriptor_makes_a_cpu_plan():
    p = abi.Plan(_desc(), abi.DEVICE_CPU)
    assert p.kernels == "cpu: gemm + col2im + groupnorm" and p.workspace == 0


@pytest.mark.parametrize("edit,message", [
    (lambda d: setattr(d.conv, "spatial_rank", 3), "spatial_rank must be 1 or 2"),
    (lambda d: setattr(d.conv, "group", 3), "group 3 must divide"),
    (lambda d: d.conv.strides.__setitem__(0, 0), "spatial dim 0: the stride must be >= 1"),
    (lambda d: d.conv.output_padding.__setitem__(1, 1), r"spatial dim 1: output_padding must be in \[0, max"),
    (lambda d: d.conv.output.__setitem__(0, 8), "output size is 7 by ConvTranspose's rule, the descriptor says 8"),
    (lambda d: setattr(d.d.gn, "S", 41), "gn.S is 41"),
])
def test_bad_descriptors_are_refused_with_the_reason(edit, message):
    d = _desc()
    edit(d)
    with pytest.raises(FusedopsError, match=message):
        abi.Plan(d, abi.DEVICE_CPU)


def test_shapes_the_binding_refuses():
    with pytest.raises(FusedopsError, match="1 or 2 spatial dims"):
        convt_abi.convtranspose_desc((2, 8, 5, 6, 7), (8, 4, 3, 3, 3), A)
