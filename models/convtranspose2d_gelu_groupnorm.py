"""Model 4: ConvTranspose2d → GELU (exact) → GroupNorm. ``groups`` is accepted and unused."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusedops import catalog
from fusedops.errors import FusedopsError
from fusedops.plugins import abi, convt_abi, torch_ops

batch_size = 128
in_channels = 64
out_channels = 64
height = width = 256
kernel_size = 3
stride = 1
groups = 8
num_groups = 8


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, groups, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = F.gelu(x)
        x = self.group_norm(x)
        return x


class ModelNew(nn.Module):
    """One fused op where it is the faster path, else ConvTranspose2d (cuDNN) then GELU + GroupNorm in one fused op.

    On sm_90 the whole model is ``fusedops::convtranspose_group_norm_act`` wherever its plan runs the wgmma
    convolution (bias, GELU and the GroupNorm statistics in its epilogue, then an in-place normalise): float32 X with
    TF32 convolutions (``torch.backends.cudnn.allow_tf32``), strict float32 as 3xTF32 (as accurate as eager FP32
    against float64), bfloat16 / float16 X. It is faster than cuDNN + the fused GELU/GroupNorm op at batch 1, 16 and
    128 in each (H100 / H200, 2026-11-27, docs/convt.md). Elsewhere the one-op kernel is slower than cuDNN, so the
    convolution stays a library call and the fused op reads its output once for the statistics and once to write
    the result: no GELU intermediate of the output's size either way.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride, groups, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)

    def forward(self, x):
        # Read from the modules' dicts: nn.Module.__getattr__ costs ~1 us a lookup, a third of this call's host time.
        conv = self._modules["conv_transpose"]
        gn = self._modules["group_norm"]
        tf32 = _tf32(x)
        if _one_op_runs_wgmma(x, conv, gn, tf32):
            p = list(conv.padding)
            return torch_ops.convtranspose_group_norm_act(
                x, conv._parameters["weight"], conv._parameters["bias"], gn._parameters["weight"],
                gn._parameters["bias"], [], gn.num_groups, list(conv.stride), p + p, list(conv.output_padding),
                list(conv.dilation), conv.groups, gn.eps, "gelu", "", "", int(tf32))
        x = conv(x)
        return torch_ops.group_norm_act(x, gn._parameters["weight"], gn._parameters["bias"], [], gn.num_groups,
                                        gn.eps, "gelu", "", "")


# (device, shape, convolution and GroupNorm settings) -> whether the one-op plan runs the wgmma kernel there.
_WGMMA_RUNS: dict = {}


def _tf32(x) -> bool:
    """Whether the convolution may use TF32, as cuDNN's would (float32 X only; strict float32 runs 3xTF32)."""
    return x.dtype != torch.float32 or torch.backends.cudnn.allow_tf32


def _one_op_runs_wgmma(x, conv, gn, tf32: bool) -> bool:
    if not x.is_cuda or x.dim() != 4:
        return False
    return _planner_runs_wgmma((x.device.index, x.dtype, gn.weight.dtype, tuple(x.shape), tuple(conv.weight.shape),
                                tuple(conv.stride), tuple(conv.padding), tuple(conv.output_padding),
                                tuple(conv.dilation), conv.groups, gn.num_groups, gn.eps, tf32))


# torch.compile and torch.export call this once while tracing and keep its answer, a property of the key's shapes,
# dtypes and device (traced, the planner's ctypes call would break a fullgraph compile).
@torch.compiler.assume_constant_result
def _planner_runs_wgmma(key: tuple) -> bool:
    runs = _WGMMA_RUNS.get(key)
    if runs is None:  # ask the planner once: it alone knows the kernel's rules and the device
        device, x_dtype, param_dtype, x_shape, w_shape, strides, pads, output_padding, dilations, group, groups, eps, \
            tf32 = key
        attrs = catalog.parse_attrs("GroupNormAct", {"num_groups": groups, "epsilon": eps, "pre": "gelu"})
        try:
            d = convt_abi.convtranspose_desc(x_shape, w_shape, attrs, strides=list(strides), pads=list(pads) * 2,
                                             output_padding=list(output_padding), dilations=list(dilations),
                                             group=group, x_dtype=x_dtype, param_dtype=param_dtype, allow_tf32=tf32)
            runs = "convt_wgmma" in abi.Plan(d, device).kernels
        except FusedopsError:  # a shape the one-op kernels refuse: today's path
            runs = False
        _WGMMA_RUNS[key] = runs
    return runs


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, groups, num_groups]
