"""ConvTransposeGroupNormAct through the C ABI (issue 13, in progress).

The op is not in the op spec yet (no attribute parsing, no ``fusedops_describe`` rules for it): this module builds
its complete descriptor from the tensors' shapes and ONNX ConvTranspose attributes, and runs plans of it on the CPU or
a CUDA device. The library's plan creation checks the descriptor (ConvTranspose's rules, the output size).

    convtranspose_desc(x_shape, w_shape, attrs, ...) -> abi.OpDesc
    convtranspose_groupnorm_act(x, w, b, gamma, beta, extras, attrs, ...) -> Y   (on X's device)
"""

from __future__ import annotations

from typing import Sequence

import torch

from fusedops import catalog
from fusedops.errors import FusedopsError

from . import abi

OP_CONVTRANSPOSE_GROUPNORM_ACT = 3  # FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT


def output_size(n: int, k: int, s: int, p0: int, p1: int, op: int, d: int) -> int:
    """ONNX ConvTranspose's output size of one spatial dimension."""
    return s * (n - 1) + op + d * (k - 1) + 1 - p0 - p1


def convtranspose_desc(x_shape: Sequence[int], w_shape: Sequence[int], attrs: catalog.FusedAttrs, *,
                       strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                       output_padding: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
                       group: int = 1, x_dtype: torch.dtype = torch.float32,
                       param_dtype: torch.dtype = torch.float32, allow_tf32: bool = True) -> abi.OpDesc:
    """Descriptor of X (N, Cin, *in) * W (Cin, C / group, *kernel) with ONNX attributes (``pads`` = begins then ends,
    defaults 1 / 0 / 0 / 1) and the GroupNorm part of ``attrs`` (num_groups, epsilon, pre, post, reduce)."""
    r = len(x_shape) - 2
    if r not in (1, 2) or len(w_shape) != r + 2:
        raise FusedopsError(f"ConvTransposeGroupNormAct: X {tuple(x_shape)} and W {tuple(w_shape)} must be (N, Cin, "
                            "*spatial) and (Cin, C / group, *kernel) with 1 or 2 spatial dims")
    strides = list(strides or [1] * r)
    pads = list(pads or [0] * (2 * r))
    output_padding = list(output_padding or [0] * r)
    dilations = list(dilations or [1] * r)
    d = abi.parse_attributes(catalog.GROUP_NORM_ACT.name, attrs)
    d.op = OP_CONVTRANSPOSE_GROUPNORM_ACT
    g = d.d.gn
    g.N, g.C = int(x_shape[0]), int(w_shape[1]) * int(group)
    outs = [output_size(int(x_shape[2 + i]), int(w_shape[2 + i]), strides[i], pads[i], pads[r + i],
                        output_padding[i], dilations[i]) for i in range(r)]
    g.S = 1
    for o in outs:
        g.S *= max(o, 0)
    g.x_dtype, g.param_dtype = abi.DTYPE_CODES[x_dtype], abi.DTYPE_CODES[param_dtype]
    d.d.K, d.d.trans_b, d.d.allow_tf32 = 0, 1, int(bool(allow_tf32))
    c = d.conv
    c.spatial_rank, c.group, c.in_channels = r, int(group), int(x_shape[1])
    for i in range(r):
        c.input[i], c.output[i], c.kernel[i] = int(x_shape[2 + i]), outs[i], int(w_shape[2 + i])
        c.strides[i], c.pads_begin[i], c.pads_end[i] = strides[i], pads[i], pads[r + i]
        c.output_padding[i], c.dilations[i] = output_padding[i], dilations[i]
    return d


def convtranspose_groupnorm_act(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, gamma: torch.Tensor,
                                beta: torch.Tensor, extras: Sequence[torch.Tensor], attrs: catalog.FusedAttrs, *,
                                strides=None, pads=None, output_padding=None, dilations=None, group: int = 1,
                                allow_tf32: bool = True, out: torch.Tensor | None = None,
                                plan: abi.Plan | None = None) -> torch.Tensor:
    """Y = reduce_C(post(GroupNorm(pre(ConvTranspose(X, W) + B)))) on X's device (CUDA: its current stream, not
    synchronised); ``plan`` reuses a plan made for the same descriptor (``make_plan``)."""
    tensors = [x, w, b, gamma, beta, *extras]
    if any(t is not None and t.device != x.device for t in tensors):
        raise FusedopsError(f"ConvTransposeGroupNormAct: every tensor must be on {x.device}")
    params = [t for t in (b, gamma, beta, *extras) if t is not None]
    pdt = params[0].dtype
    if any(t.dtype != pdt for t in params) or pdt not in (torch.float32, x.dtype):
        b, gamma, beta, *extras = [t.float() if t is not None else None for t in (b, gamma, beta, *extras)]
        pdt = torch.float32
    if plan is None:
        plan = make_plan(x, w, attrs, pdt, strides=strides, pads=pads, output_padding=output_padding,
                         dilations=dilations, group=group, allow_tf32=allow_tf32)
    g, cv = plan.desc.d.gn, plan.desc.conv
    shape = (g.N, 1 if attrs.reduce else g.C, *[cv.output[i] for i in range(cv.spatial_rank)])
    y = out if out is not None else torch.empty(shape, dtype=x.dtype, device=x.device)
    if tuple(y.shape) != shape or y.dtype != x.dtype or y.device != x.device:
        raise FusedopsError(f"ConvTransposeGroupNormAct: out {tuple(y.shape)} {y.dtype}, expected {shape} {x.dtype}")
    if y.numel() == 0:
        return y
    ws = torch.empty(plan.workspace, dtype=torch.uint8, device=x.device) if plan.workspace else None
    tensors = [t.contiguous() if t is not None else None for t in (x, w, b, gamma, beta, *extras)]
    ptrs = [t.data_ptr() if t is not None else None for t in tensors]
    stream = torch.cuda.current_stream(x.device).cuda_stream if x.device.type == "cuda" else None
    plan.run(ptrs, y.data_ptr(), ws.data_ptr() if ws is not None else None, plan.workspace, stream)
    return y


def make_plan(x: torch.Tensor, w: torch.Tensor, attrs: catalog.FusedAttrs, param_dtype: torch.dtype,
              **conv) -> abi.Plan:
    """A CUDA plan for these tensors' shapes and dtypes (``conv``: strides, pads, output_padding, dilations, group,
    allow_tf32)."""
    d = convtranspose_desc(tuple(x.shape), tuple(w.shape), attrs, x_dtype=x.dtype, param_dtype=param_dtype, **conv)
    return abi.Plan(d, x.device.index if x.device.type == "cuda" else abi.DEVICE_CPU)
