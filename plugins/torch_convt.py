"""PyTorch op ``fusedops::convtranspose_group_norm_act``: the catalog's ConvTransposeGroupNormAct (issue 13).

Y = reduce_C(post(GroupNorm(pre(ConvTranspose(X, W) + B)))) with ONNX ConvTranspose's attributes (``pads`` as ONNX
writes them: begins, then ends; empty lists take ONNX's defaults; the kernel shape is W's), 1 or 2 spatial dims.
The op runs in C++ (``plugins/torch/fusedops_torch.cpp``) through the same plans as the other ops; this module holds
its Python parts the way ``torch_ops`` does for the others: the fake kernel (the library's shape rules), autograd
through the catalog's reference math, and the float64 reference op. ``torch_ops.load()`` registers them (``register``),
and ``torch_ops.convtranspose_group_norm_act`` is the op as a Python callable:

    from fusedops.plugins import torch_ops
    y = torch_ops.convtranspose_group_norm_act(x, w, b, gamma, beta, [], num_groups=8, pre="gelu")
"""

from __future__ import annotations

import functools
from typing import Sequence

import torch

from fusedops import catalog
from fusedops.errors import FusedopsError

from . import abi
from .torch_support import check_shapes, reference_grads, resolve_allow_tf32

OP = catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name
SCHEMA_DEFAULTS = ((), (), (), (), 1, 1e-5, "", "", "", -1)  # after num_groups: strides ... allow_tf32


@functools.lru_cache(maxsize=256)
def parsed_attrs(num_groups: int, strides: tuple, pads: tuple, output_padding: tuple, dilations: tuple, group: int,
                 epsilon: float, pre: str, post: str, reduce: str, allow_tf32: int = 1) -> catalog.FusedAttrs:
    """The catalog's attributes of one call (validated once per distinct combination)."""
    attrs: dict[str, object] = {"num_groups": num_groups, "epsilon": epsilon, "pre": pre, "post": post,
                                "reduce": reduce, "group": group, "allow_tf32": allow_tf32}
    for name, values in (("strides", strides), ("pads", pads), ("output_padding", output_padding),
                         ("dilations", dilations)):
        if values:
            attrs[name] = [int(v) for v in values]
    try:
        return catalog.parse_attrs(OP, attrs)
    except catalog.CatalogError as e:
        raise FusedopsError(str(e)) from None


def _attrs(args: Sequence, resolve_tf32=None) -> catalog.FusedAttrs:
    """Attributes from the op's arguments after the tensors (num_groups, strides, ..., allow_tf32; trailing defaults
    may be absent, as PyTorch hands them to setup_context); allow_tf32 -1 resolved by ``resolve_tf32`` (default:
    PyTorch's float32 matmul precision now)."""
    resolve_tf32 = resolve_tf32 or resolve_allow_tf32
    num_groups, *rest = args
    rest = list(rest) + list(SCHEMA_DEFAULTS[len(rest):])
    strides, pads, output_padding, dilations, group, epsilon, pre, post, reduce, allow_tf32 = rest
    return parsed_attrs(int(num_groups), tuple(strides), tuple(pads), tuple(output_padding), tuple(dilations),
                        int(group), float(epsilon), pre, post, reduce, resolve_tf32(int(allow_tf32)))


def fake(x, w, b, gamma, beta, extras, *args):
    """The fake kernel: the library's shape rules on what is known, then the output shape."""
    a = _attrs(args, resolve_tf32=lambda v: 1 if v == -1 else v)
    check_shapes(abi.parse_attributes(OP, a, a.conv.onnx_attrs()), [x, w, b, gamma, beta, *extras])
    return x.new_empty(catalog.output_shape(OP, tuple(x.shape), a, tuple(w.shape)))


def _setup_context(ctx, inputs, output) -> None:
    x, w, b, gamma, beta, extras, *args = inputs
    ctx.has_bias = b is not None
    ctx.save_for_backward(x, w, *([b] if b is not None else []), gamma, beta, *extras)
    ctx.attrs = _attrs(args)
    # The backward returns one entry per argument in the argument's own structure: PyTorch's pytree sees an empty
    # int[] as a list with no children (which wants []) and any other int list or scalar as a leaf (None).
    ctx.attr_grads = tuple([] if isinstance(v, (list, tuple)) and not v else None for v in args)


def _backward(ctx, grad):
    saved = list(ctx.saved_tensors)
    x, w = saved[:2]
    b = saved[2] if ctx.has_bias else None
    gamma, beta, *extras = saved[3:] if ctx.has_bias else saved[2:]
    a = ctx.attrs

    def forward(x_, w_, *rest):
        b_, rest = (rest[0], rest[1:]) if ctx.has_bias else (None, rest)
        g_, be_, *e_ = rest
        return catalog.convtranspose_group_norm_act_reference(x_, w_, b_, g_, be_, list(e_), a)

    tensors = (x, w, *([b] if ctx.has_bias else []), gamma, beta, *extras)
    g = list(reference_grads(forward, tensors, grad))
    gb = g.pop(2) if ctx.has_bias else None
    # as many entries as PyTorch counts arguments (it drops trailing ones left at their defaults)
    return ((g[0], g[1], gb, g[2], g[3], list(g[4:])) + ctx.attr_grads)[:len(ctx.needs_input_grad)]


def _reference(x, w, b, gamma, beta, extras, *args):
    return catalog.convtranspose_group_norm_act_reference(x, w, b, gamma, beta, list(extras), _attrs(args))


def register(lib: torch.library.Library) -> None:
    """The Python parts of the op but the fake kernel, on torch_ops' library fragment (PyTorch wants the fake to come
    from the module the C++ library names, torch_ops, which registers ``fake`` under its own name)."""
    lib.define("_reference_convtranspose_group_norm_act(Tensor x, Tensor w, Tensor? b, Tensor gamma, Tensor beta, "
               "Tensor[] extras, int num_groups, int[] strides, int[] pads, int[] output_padding, int[] dilations, "
               "int group, float epsilon, str pre, str post, str reduce, int allow_tf32) -> Tensor")
    lib.impl("_reference_convtranspose_group_norm_act", _reference, "CompositeExplicitAutograd")
    torch.library.register_autograd("fusedops::convtranspose_group_norm_act", _backward,
                                    setup_context=_setup_context, lib=lib)
