"""The transposed convolution of ConvTransposeGroupNormAct: ONNX ConvTranspose's attributes, checked against the op
spec (``fusedops/spec/ops.toml``), and its PyTorch reference with ONNX's semantics. ``fusedops.catalog`` builds the
op's attributes and reference on it.

ONNX pads are [begins..., ends...] and may differ per side; torch's ``padding`` is symmetric. The reference therefore
runs torch's conv_transpose without padding (the full output), appends ``output_padding`` zeros at the end of each
spatial dim (positions no input reaches) and crops ``pads`` from both sides:
    output[i] = strides[i] * (input[i] - 1) + output_padding[i] + dilations[i] * (kernel[i] - 1) + 1
                - pads_begin[i] - pads_end[i].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from .attr_values import int_attr, ints_attr
from .chain_syntax import quote
from .errors import CatalogError
from .spec import tables as _spec

OP = "ConvTransposeGroupNormAct"
_OP_ATTRS = next(o["attributes"] for o in _spec.OPS if o["name"] == OP)
LISTS = tuple(a for a in _OP_ATTRS if _spec.ATTRIBUTES[a]["type"] == "INTS")  # kernel_shape, strides, pads, ...
SPATIAL_RANKS = (1, 2)  # what the kernels take (fusedops_conv_desc)


@dataclass(frozen=True)
class ConvAttrs:
    """ConvTranspose's attributes; an empty list is ONNX's default (kernel_shape: W's spatial dims; strides,
    dilations: 1; pads, output_padding: 0)."""

    kernel_shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    output_padding: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    group: int = 1

    @property
    def spatial_rank(self) -> int | None:
        """The spatial rank the given lists agree on, None when every list is empty."""
        for name in LISTS:
            values = getattr(self, name)
            if values:
                return len(values) // _spec.ATTRIBUTES[name]["per_dim"]
        return None

    def onnx_attrs(self) -> dict[str, object]:
        """As written on a node: the lists that are given (onnxruntime rejects an empty INTS on ConvTranspose, and
        an absent one is ONNX's default), and group."""
        d: dict[str, object] = {name: [int(v) for v in getattr(self, name)] for name in LISTS if getattr(self, name)}
        d["group"] = int(self.group)
        return d

    def resolved(self, kernel: Sequence[int]) -> ConvAttrs:
        """Every list written out for W's spatial dims ``kernel`` (ONNX's defaults applied)."""
        r = len(kernel)
        if self.spatial_rank not in (None, r):
            raise CatalogError(f"{OP}: the attributes are for {self.spatial_rank} spatial dim(s), W has {r}")
        if self.kernel_shape and tuple(self.kernel_shape) != tuple(kernel):
            raise CatalogError(f"{OP}: kernel_shape {list(self.kernel_shape)} differs from W's spatial dims "
                               f"{list(kernel)}")
        return ConvAttrs(tuple(int(k) for k in kernel), self.strides or (1,) * r, self.pads or (0,) * (2 * r),
                         self.output_padding or (0,) * r, self.dilations or (1,) * r, self.group)

    def output_size(self, input_size: Sequence[int], kernel: Sequence[int]) -> tuple[int, ...]:
        """ONNX ConvTranspose's output spatial sizes."""
        c = self.resolved(kernel)
        r = len(kernel)
        return tuple(c.strides[i] * (input_size[i] - 1) + c.output_padding[i] + c.dilations[i] * (kernel[i] - 1) + 1
                     - c.pads[i] - c.pads[r + i] for i in range(r))


def parse_conv_attrs(attrs: dict[str, object]) -> ConvAttrs:
    """ConvAttrs from a node's attributes (the conv ones; others are ignored here), validated by the spec's rules
    and the C ABI's (plugins/csrc/core/conv_rules.h); CatalogError naming the attribute."""
    lists: dict[str, tuple[int, ...]] = {}
    rank = None
    for name in LISTS:
        values = ints_attr(OP, name, attrs.get(name, ()))
        lo, hi = _spec.ATTRIBUTES[name]["range"]
        bad = [v for v in values if not lo <= v <= hi]
        if bad:
            raise CatalogError(f"{OP}: attribute {quote(name)} has {bad[0]}; every value must be in {lo}..{hi}")
        per_dim = _spec.ATTRIBUTES[name]["per_dim"]
        if values:
            r, odd = divmod(len(values), per_dim)
            if odd or r not in SPATIAL_RANKS:
                raise CatalogError(f"{OP}: attribute {quote(name)} has {len(values)} values; it takes {per_dim} per "
                                   f"spatial dim, for {' or '.join(map(str, SPATIAL_RANKS))} spatial dims")
            if rank is not None and r != rank:
                raise CatalogError(f"{OP}: attribute {quote(name)} is for {r} spatial dim(s), the other lists for "
                                   f"{rank}")
            rank = r
        lists[name] = values
    group = int_attr(OP, "group", attrs.get("group", _spec.ATTRIBUTES["group"]["default"]))
    lo, hi = _spec.ATTRIBUTES["group"]["range"]
    if not lo <= int(group) <= hi:
        raise CatalogError(f"{OP}: group must be in {lo}..{hi}, got {int(group)}")
    conv = ConvAttrs(**lists, group=int(group))
    if rank is not None:
        s = conv.strides or (1,) * rank
        d = conv.dilations or (1,) * rank
        for i, p in enumerate(conv.output_padding):
            if p >= max(s[i], d[i]):
                raise CatalogError(f"{OP}: output_padding[{i}] = {p} must be < max(stride, dilation) = "
                                   f"{max(s[i], d[i])}")
    return conv


def conv_transpose(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, conv: ConvAttrs) -> torch.Tensor:
    """ONNX ConvTranspose(X, W, B) in x's dtype (float64 tensors give a float64 reference); CatalogError naming the
    input whose shape does not fit."""
    r = x.dim() - 2
    if r not in SPATIAL_RANKS:
        raise CatalogError(f"{OP}: X must have rank 3-4 (N, Cin, *spatial), got shape {tuple(x.shape)}")
    if w.dim() != x.dim() or w.shape[0] != x.shape[1]:
        raise CatalogError(f"{OP}: W of shape {tuple(w.shape)} must be (Cin={x.shape[1]}, C / group, *kernel) for X "
                           f"of shape {tuple(x.shape)}")
    if x.shape[1] % conv.group:
        raise CatalogError(f"{OP}: Cin={x.shape[1]} is not divisible by group={conv.group}")
    c = conv.resolved(tuple(w.shape[2:]))
    channels = w.shape[1] * conv.group
    if b is not None and b.numel() != channels:
        raise CatalogError(f"{OP}: bias B has {b.numel()} elements, expected C={channels}")
    out = conv.output_size(tuple(x.shape[2:]), tuple(w.shape[2:]))
    if any(o < 1 for o in out):
        raise CatalogError(f"{OP}: the output would have spatial size {list(out)}; pads crop all of it")
    fn = F.conv_transpose1d if r == 1 else F.conv_transpose2d
    full = fn(x, w.to(x.dtype), None, stride=c.strides, padding=0, groups=c.group, dilation=c.dilations)
    tail = []
    for i in reversed(range(r)):  # F.pad lists the last dim first: (begin, end) pairs
        tail += [0, c.output_padding[i]]
    full = F.pad(full, tail)
    crop = tuple(slice(c.pads[i], full.shape[2 + i] - c.pads[r + i]) for i in range(r))
    y = full[(slice(None), slice(None), *crop)]
    if b is not None:
        y = y + b.reshape(1, -1, *([1] * r)).to(x.dtype)
    return y
