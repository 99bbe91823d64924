"""Opt-in rules (``fuse_model(..., convtranspose=True)``): a ConvTranspose producing a GroupNormAct's X becomes one
``ConvTransposeGroupNormAct`` node, which then grows its post chain and channel reduction like the other ops.

Off by default although the ONNX Runtime library and the TensorRT plugin both run ConvTransposeGroupNormAct (since
2026-11-27): a runtime's node runs the one op wherever it is, and off sm_90 and for stride != 1 its kernels are
slower than cuDNN's convolution + GroupNormAct, and its strict float32 (3xTF32) is less accurate than cuDNN's FP32
(docs/convt.md). Without the option the ConvTranspose stays and the GroupNormAct after it is fused as before.
ConvTranspose's auto_pad (other than NOTSET / VALID) and output_shape are not attributes of the fused op, and only
1-D and 2-D convolutions are fused; such a node is left as it is (its GroupNormAct fused), with the reason in the
fusion report.
"""

from __future__ import annotations

from dataclasses import replace

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusedops import catalog

from .rule_util import CONVT_GN, FLOAT_TYPES, GN, Fused, attr, rank, read_fused, var
from .rules_grow import _fused_node, reduce_rule, step_rules
from .steps import REDUCE_OPS, STEP_PATTERNS


def convtranspose_plan(x, w, fused, conv_out, bias=None, **_) -> Fused | str:
    """GroupNormAct ``fused`` whose X is ConvTranspose(x, w, bias) → ConvTransposeGroupNormAct, or why not."""
    f = read_fused(fused)
    if f is None or f.op_type != GN:
        return "its consumer is not a GroupNormAct"
    node = conv_out.producer()
    if attr(node, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"auto_pad={attr(node, 'auto_pad')} (the fused op takes explicit pads only)"
    if attr(node, "output_shape") is not None:
        return "output_shape is given (the fused op takes explicit pads only)"
    if x.dtype not in FLOAT_TYPES or x.dtype != f.x_dtype or w.dtype != x.dtype:
        return "X and W are not of one dtype the fused ops take (float32, float16, bfloat16)"
    if rank(x) not in (3, 4) or rank(w) != rank(x):
        return "only 1-D and 2-D transposed convolutions are fused (X of rank 3 or 4, W of X's rank)"
    dims = list(w.shape)
    if not all(isinstance(d, int) for d in dims):
        return "W's shape is not static"
    conv = {k: list(attr(node, k)) for k in ("kernel_shape", "strides", "pads", "output_padding", "dilations")
            if attr(node, k) is not None}
    try:
        a = catalog.parse_attrs(catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name, {
            "num_groups": f.attrs.num_groups, **conv, "group": int(attr(node, "group", 1))}).conv
        a = a.resolved(dims[2:])  # every list written out (ONNX's defaults applied): no runtime relies on defaults
    except catalog.CatalogError as e:
        return str(e)
    if dims[1] * a.group != f.channels or (isinstance(x.shape[1], int) and x.shape[1] != dims[0]):
        return "W's channels do not match X and the GroupNorm"
    if bias is not None and (bias.shape is None or list(bias.shape) != [f.channels] or bias.dtype not in FLOAT_TYPES):
        return "the bias is not a (C,) float tensor"
    attrs = replace(f.attrs, conv=a, allow_tf32=1)
    return Fused(CONVT_GN, attrs, [x, w, bias, *f.inputs[1:]], f.rank, f.channels, f.origins)


def _fold_rule(fuser) -> orp.RewriteRule:
    def target(op, x, w):
        conv = op.ConvTranspose(x, w, var("bias", optional=True), _allow_other_attributes=True, _outputs=["conv_out"])
        return _fused_node(op, GN, conv)

    return orp.RewriteRule(target, lambda op, **b: fuser.emit(op, convtranspose_plan(**b), b["fused"]),
                           lambda ctx, **b: isinstance(convtranspose_plan(**b), Fused), name="fold_convtranspose")


def convtranspose_rules(fuser) -> orp.RewriteRuleSet:
    """The fold, then what grows a ConvTransposeGroupNormAct: post steps and a channel reduction (its pre chain is
    the GroupNormAct's, absorbed before the fold)."""
    rules = [_fold_rule(fuser)]
    for sp in STEP_PATTERNS:
        rules += step_rules(fuser, sp, CONVT_GN, "post")
    rules += [reduce_rule(fuser, CONVT_GN, reduce_op, reduce, axes_input)
              for reduce_op, reduce in REDUCE_OPS.items() for axes_input in (True, False)]
    return orp.RewriteRuleSet(rules)


def unfolded_notes(model: ir.Model) -> list[str]:
    """For the fusion report, with the option on: each ConvTranspose still feeding a GroupNormAct, and why."""
    notes = []
    for node in model.graph:
        x = node.inputs[0] if node.op_type == GN and node.inputs else None
        conv = x.producer() if x is not None else None
        if conv is None or conv.op_type != "ConvTranspose" or conv.domain != "":
            continue
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        why = convtranspose_plan(conv.inputs[0], conv.inputs[1], node.outputs[0], x, bias)
        if isinstance(why, Fused):
            why = "its output has another consumer or is a graph output" if len(x.uses()) != 1 or \
                x.is_graph_output() else "recognised, but the rewriter did not replace it"
        notes.append(f"ConvTranspose {conv.name!r} before GroupNormAct {node.name!r} not folded: {why}")
    return notes
