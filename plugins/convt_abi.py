"""ConvTransposeGroupNormAct through the C ABI (issue 13, in progress).

The op is in the op spec and the C ABI (op code 3, ``fusedops_conv_attributes``, ``fusedops_describe``'s ConvTranspose
rules); the ORT adapter registers it (the TensorRT adapter not yet), and the fuser writes it only on request
(``fuse_model(..., convtranspose=True)``). This module builds its descriptor through the library's parser and shape
rules and runs plans of it on the CPU or a CUDA device.

    convtranspose_desc(x_shape, w_shape, attrs, ...) -> abi.OpDesc
    convtranspose_groupnorm_act(x, w, b, gamma, beta, extras, attrs, ...) -> Y   (on X's device)
"""

from __future__ import annotations

from typing import Sequence

import torch

from fusedops import catalog
from fusedops.errors import FusedopsError

from . import abi

OP = abi.CONVTRANSPOSE_GROUP_NORM_ACT


def convtranspose_desc(x_shape: Sequence[int], w_shape: Sequence[int], attrs: catalog.FusedAttrs, *,
                       strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                       output_padding: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
                       group: int = 1, x_dtype: torch.dtype = torch.float32,
                       param_dtype: torch.dtype = torch.float32, allow_tf32: bool = True) -> abi.OpDesc:
    """Descriptor of X (N, Cin, *in) * W (Cin, C / group, *kernel) with ONNX attributes (``pads`` = begins then ends;
    None = ONNX's defaults) and the GroupNorm part of ``attrs`` (num_groups, epsilon, pre, post, reduce), completed by
    the library's shape rules (FusedopsError naming what is wrong)."""
    a = catalog.FusedAttrs(**{**attrs.__dict__, "allow_tf32": int(bool(allow_tf32))})
    conv = {"strides": strides, "pads": pads, "output_padding": output_padding, "dilations": dilations,
            "group": int(group)}
    d = abi.parse_attributes(OP, a, {k: v for k, v in conv.items() if v is not None})
    per_channel = abi.tensor_desc(param_dtype, None)  # B, gamma, beta, extras: dtype known, size checked at run
    descs = [abi.tensor_desc(x_dtype, tuple(x_shape)), abi.tensor_desc(x_dtype, tuple(w_shape))]
    descs += [per_channel] * (3 + a.num_extras)
    d, _ = abi.describe(d, descs)
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
              options: abi.PlanOptions | None = None, **conv) -> abi.Plan:
    """A CUDA plan for these tensors' shapes and dtypes (``conv``: strides, pads, output_padding, dilations, group,
    allow_tf32; ``options``: kernel variants for A/B timing and tests, e.g. ``convt_kernel``)."""
    d = convtranspose_desc(tuple(x.shape), tuple(w.shape), attrs, x_dtype=x.dtype, param_dtype=param_dtype, **conv)
    return abi.Plan(d, x.device.index if x.device.type == "cuda" else abi.DEVICE_CPU, options)
