"""ConvTransposeGroupNormAct's attributes and shape rules behind the C ABI (fusedops_parse_attributes with
fusedops_conv_attributes, then fusedops_describe): ONNX ConvTranspose's defaults and output size, unknown dims, and a
clear message naming the attribute or input for every rule broken (issue 13)."""

from __future__ import annotations

import pytest
import torch

from fusedops import catalog
from fusedops.errors import FusedopsError
from native_support import require_native_build

require_native_build()

from fusedops.plugins import abi  # noqa: E402

OP = abi.CONVTRANSPOSE_GROUP_NORM_ACT
F32 = torch.float32


def attrs(**kw):
    return catalog.parse_attrs("GroupNormAct", {"num_groups": 4, **kw})


def describe(x, w, conv=None, a=None, per_channel=None, x_dtype=F32, w_dtype=F32):
    """(descriptor, output shape) for X and W shapes; B, gamma, beta of C elements unless ``per_channel`` says."""
    a = a or attrs()
    d = abi.parse_attributes(OP, a, conv if conv is not None else {})
    if per_channel is None:
        C = None if w is None or w[1] is None else w[1] * (conv or {}).get("group", 1)
        per_channel = [(F32, (C,) if C is not None else None)] * (3 + a.num_extras)
    descs = [abi.tensor_desc(x_dtype, x), abi.tensor_desc(w_dtype, w)]
    descs += [abi.tensor_desc(dt, shape) for dt, shape in per_channel]
    return abi.describe(d, descs)


def test_defaults_are_onnx_convtranspose_defaults():
    d, shape = describe((2, 8, 5, 6), (8, 4, 3, 3))
    assert shape == (2, 4, 7, 8)
    cv = d.conv
    assert (cv.spatial_rank, cv.group, cv.in_channels) == (2, 1, 8)
    assert list(cv.kernel[:2]) == [3, 3] and list(cv.strides[:2]) == [1, 1] and list(cv.dilations[:2]) == [1, 1]
    assert list(cv.pads_begin[:2]) == [0, 0] and list(cv.output_padding[:2]) == [0, 0]
    assert (d.d.gn.N, d.d.gn.C, d.d.gn.S) == (2, 4, 56) and d.d.gn.x_dtype == 0 and d.d.gn.param_dtype == 0


def test_every_attribute_enters_the_output_size():
    conv = {"strides": [2, 3], "pads": [1, 0, 1, 2], "output_padding": [1, 2], "dilations": [1, 2], "group": 2,
            "kernel_shape": [3, 3]}
    d, shape = describe((2, 8, 5, 6), (8, 4, 3, 3), conv)
    # 2*4 + 1 + 1*2 + 1 - 1 - 1 = 10; 3*5 + 2 + 2*2 + 1 - 0 - 2 = 20; C = 4 * group
    assert shape == (2, 8, 10, 20) and d.d.gn.C == 8 and d.conv.group == 2
    assert (d.conv.pads_begin[1], d.conv.pads_end[1]) == (0, 2)


def test_one_spatial_dim_and_a_channel_reduction():
    a = attrs(reduce="max", num_groups=2)
    d, shape = describe((3, 6, 11), (6, 2, 5), {"strides": [2], "pads": [2, 2], "output_padding": [1]}, a=a)
    assert shape == (3, 1, 22) and d.conv.spatial_rank == 1  # 2*10 + 1 + 4 + 1 - 4


def test_unknown_dims_stay_unknown_and_an_empty_input_gives_an_empty_output():
    _, shape = describe((None, 8, None, 6), (8, 4, 3, 3))
    assert shape == (None, 4, None, 8)
    d, shape = describe((2, 8, 0, 6), (8, 4, 3, 3))
    assert shape == (2, 4, 0, 8) and d.d.gn.S == 0


@pytest.mark.parametrize("conv,message", [
    ({"strides": [1, 1], "dilations": [1]}, "attribute 'dilations' is for 1 spatial dims but 'strides' for 2"),
    ({"pads": [0, 0, 0]}, r"'pads' has 3 values; expected 2 per spatial dim \(begins, then ends\)"),
    ({"strides": [1, 1, 1]}, "'strides' has 3 values; expected 1 per spatial dim, for 1 or 2 spatial dims"),
    ({"pads": [-1, 0, 0, 0]}, r"'pads' value -1 \(index 0\) must be in \[0, 2147483647\]"),
    ({"strides": [0, 1]}, r"'strides' value 0 \(index 0\) must be in \[1, 2147483647\]"),
    ({"dilations": [1, 2**31]}, "'dilations' value 2147483648"),
    ({"group": 0}, r"attribute 'group' must be in \[1, 2147483647\], got 0"),
    ({"strides": [2, 1], "output_padding": [2, 0]},
     r"'output_padding' 2 \(spatial dim 0\) must be below max\(stride 2, dilation 1\)"),
])
def test_bad_attributes_are_named(conv, message):
    with pytest.raises(FusedopsError, match=message):
        abi.parse_attributes(OP, attrs(), conv)


@pytest.mark.parametrize("x,w,conv,message", [
    ((2, 8, 5, 6), (8, 4, 5, 3), {"kernel_shape": [3, 3]},
     r"attribute 'kernel_shape' is 3 for spatial dim 0 but W \(8, 4, 5, 3\) has 5"),
    ((2, 6, 5, 6), (8, 4, 3, 3), {}, r"X has 6 input channels but W \(8, 4, 3, 3\)"),
    ((2, 8, 5, 6), (8, 4, 3, 3), {"group": 3}, "group=3 does not divide the 8 input channels"),
    ((2, 8, 1, 6), (8, 4, 1, 3), {"pads": [1, 0, 1, 0]}, r"spatial dim 0: the output size is -1 \(< 1\)"),
    ((2, 8, 5, 6, 7), (8, 4, 3, 3, 3), {}, "X must be \\(N, Cin, \\*spatial\\) with 1 or 2 spatial dims"),
    ((2, 8, 5, 6), (8, 4, 3), {}, "must have the same number of spatial dims"),
    ((2, 8, 5, 6), (8, 4, 3, 3), {"strides": [2]}, "the convolution attributes are for 1 spatial dims but X"),
])
def test_bad_shapes_are_named(x, w, conv, message):
    with pytest.raises(FusedopsError, match=message):
        describe(x, w, conv)


def test_inputs_checked_as_for_the_other_ops():
    with pytest.raises(FusedopsError, match="W has float16 but X has float32"):
        describe((2, 8, 5, 6), (8, 4, 3, 3), w_dtype=torch.float16)
    with pytest.raises(FusedopsError, match="gamma has 3 elements, expected C=4"):
        describe((2, 8, 5, 6), (8, 4, 3, 3), per_channel=[(F32, (4,)), (F32, (3,)), (F32, (4,))])
    with pytest.raises(FusedopsError, match=r"chains reference 1 extra input\(s\)"):
        describe((2, 8, 5, 6), (8, 4, 3, 3), a=attrs(pre="add(@0)"), per_channel=[(F32, (4,))] * 3)
    with pytest.raises(FusedopsError, match="C=4 is not divisible by num_groups=3"):
        describe((2, 8, 5, 6), (8, 4, 3, 3), a=attrs(num_groups=3))


def test_the_convolution_attributes_are_required_and_known():
    with pytest.raises(FusedopsError, match=r"the convolution attributes \(fusedops_attributes.conv\) are missing"):
        abi.parse_attributes(OP, attrs())
    with pytest.raises(FusedopsError, match="unknown convolution attribute"):
        abi.parse_attributes(OP, attrs(), {"auto_pad": "SAME_UPPER"})


def test_a_described_descriptor_makes_a_plan():
    d, _ = describe((2, 8, 5, 6), (8, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]})
    plan = abi.Plan(d, abi.DEVICE_CPU)
    assert plan.kernels.startswith("cpu:")


def test_a_channels_last_descriptor_is_refused_on_the_cpu_and_a_bad_flag_named():
    """The CPU kernel indexes NCHW: a channels-last descriptor gets UNSUPPORTED, not a wrong answer."""
    d, _ = describe((2, 8, 5, 6), (8, 4, 3, 3))
    d.conv.channels_last = 1
    with pytest.raises(FusedopsError, match=r"CPU kernel takes NCHW tensors only \(channels_last = 1 given\)"):
        abi.Plan(d, abi.DEVICE_CPU)
    d.conv.channels_last = 7
    with pytest.raises(FusedopsError, match="channels_last must be 0 or 1, got 7"):
        abi.Plan(d, abi.DEVICE_CPU)
