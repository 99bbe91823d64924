"""Phase 2 of the fuser, run to a fixed point: each rewrite absorbs one op or op group into a fused node.

- ``pre`` / ``post`` elementwise steps (``steps.STEP_PATTERNS``), a channel reduction after the node (``reduce``);
- a producing Gemm / MatMul of a rank-2 GroupNormAct → ``GemmGroupNormAct``;
- *token* GEMMs: MatMul of a rank ≥ 3 input (+ bias) whose rows (…, C) → (M, C) feed a rank-2 GroupNormAct →
  ``GemmGroupNormAct`` of the flattened input, and a Reshape of a GemmGroupNormAct's (M, C) output back to its
  input's rows (…, C) → ``GemmGroupNormAct`` of the unflattened input (rows = all leading dims);
- a 16-bit X cast up to float32 around a GroupNormAct (Cast(x16 → float) → node → Cast(→ x16's type)), as exporters
  write for 16-bit models → the node on x16 directly (its statistics are float32 either way).

The rewriter only replaces a match whose intermediate values have no other consumer and are not graph outputs, so
only single-consumer intermediates are fused, and the first unsupported op stops a chain.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusedops import catalog

from .rule_util import (DOMAIN, FLOAT_TYPES, GEMM_GN, GN, GROWN_BY_DEFAULT, Flatten, Fused, attr, channel_vector,
                        const, rank, read_fused, renumber, var)
from .steps import REDUCE_OPS, STEP_PATTERNS, StepPattern


def _fused_node(op, op_type: str, *inputs):
    return getattr(op, op_type)(*inputs, _domain=DOMAIN, _allow_other_inputs=True, _allow_other_attributes=True,
                                _outputs=["fused"])


def step_rules(fuser, sp: StepPattern, op_type: str, where: str) -> list[orp.RewriteRule]:
    if where == "post":
        def target(op):
            return sp.graph(op, _fused_node(op, op_type))
    else:
        def target(op, x):
            return _fused_node(op, op_type, sp.graph(op, x))

    def plan(b) -> Fused | None:
        f = read_fused(b["fused"])
        if f is None:
            return None
        if where == "post" and f.attrs.reduce:
            return None  # post runs before the reduction; nothing can follow a reduction
        if where == "pre":
            x = b["x"]
            if x.dtype != f.x_dtype or rank(x) != f.rank or (x.shape is not None and x.shape[1] != f.channels):
                return None
        got = sp.extract(b, f.rank, f.channels, f.axis)
        if got is None:
            return None
        name, params, operand = got
        kind = catalog.STEP_KINDS[name]
        if isinstance(operand, np.ndarray):
            operand = f.add_extra(operand)
        step = catalog.Step(name, params=params if params else kind.defaults if not kind.binary else (),
                            operand=operand)
        if where == "post":
            f.attrs = replace(f.attrs, post=[*f.attrs.post, step])
        else:
            f.attrs = replace(f.attrs, pre=[step, *f.attrs.pre])
            f.inputs[0] = b["x"]
        return f if f.fits() else None

    rule = orp.RewriteRule(target, lambda op, **b: fuser.emit(op, plan(b), b["out"] if where == "post" else
                                                              b["fused"]),
                           lambda ctx, **b: plan(b) is not None, name=f"{where}_{sp.key}_{op_type}")
    return list(rule.commute()) if sp.commute else [rule]


def reduce_rule(fuser, op_type: str, reduce_op: str, reduce: str, axes_input: bool) -> orp.RewriteRule:
    if axes_input:  # opset >= 18 (ReduceSum: >= 13)
        def target(op, axes):
            return getattr(op, reduce_op)(_fused_node(op, op_type), axes, _allow_other_attributes=True,
                                          _outputs=["out"])
    else:
        def target(op):
            return getattr(op, reduce_op)(_fused_node(op, op_type), _allow_other_attributes=True, _outputs=["out"])

    def plan(b) -> Fused | None:
        f = read_fused(b["fused"])
        if f is None or f.attrs.reduce:
            return None
        node = b["out"].producer()
        axes = const(b.get("axes")) if axes_input else attr(node, "axes")
        if axes is None or int(attr(node, "keepdims", 1)) != 1:
            return None
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
        if [a + f.rank if a < 0 else a for a in axes] != [f.axis]:
            return None
        f.attrs = replace(f.attrs, reduce=reduce)
        return f

    return orp.RewriteRule(target, lambda op, **b: fuser.emit(op, plan(b), b["out"]),
                           lambda ctx, **b: plan(b) is not None,
                           name=f"reduce_{reduce_op}_{'input' if axes_input else 'attr'}_{op_type}")


# ---------------------------------------------------------------------------------------------------------------------
# GEMM folds
# ---------------------------------------------------------------------------------------------------------------------

def _bias_input(bias: ir.Value | None, z_rank: int, c: int) -> np.ndarray | ir.Value | None:
    """A GEMM bias as B: a constant broadcasting on the last axis only → (C,) float32; a (C,) float tensor as is."""
    if bias is None:
        return np.zeros(c, np.float32)
    arr = channel_vector(const(bias), z_rank, c, axis=z_rank - 1)
    if arr is not None:
        return arr
    if bias.dtype in FLOAT_TYPES and bias.shape is not None and list(bias.shape) == [c]:
        return bias
    return None


def _gemm_fused(f: Fused, x, w, b_in, trans_b: int, take_leading_add: bool, rank_: int) -> Fused:
    """GemmGroupNormAct from GroupNormAct ``f`` and the GEMM that produces its input; a leading per-column ``add``
    of the pre chain (the bias Add absorbed first) becomes B when the GEMM has none."""
    pre = list(f.attrs.pre)
    extras = f.extras
    post = f.attrs.post
    if take_leading_add and pre and pre[0].name == "add":
        first = pre.pop(0)
        if isinstance(first.operand, int):
            k = first.operand
            b_in = extras[k]
            if not any(s.kind.binary and s.operand == k for s in pre + post):
                extras = extras[:k] + extras[k + 1:]
                pre, post = renumber(pre, k), renumber(post, k)
        else:
            b_in = np.full(f.channels, first.operand, np.float32)
    attrs = replace(f.attrs, pre=pre, post=post, trans_b=trans_b, allow_tf32=1)
    return Fused(GEMM_GN, attrs, [x, w, b_in, f.inputs[1], f.inputs[2], *extras], rank_, f.channels, f.origins)


def gemm_plan(a, w, fused, gemm_out, bias=None, **_) -> Fused | None:
    """A rank-2 Gemm / MatMul producing a rank-2 GroupNormAct's X."""
    f = read_fused(fused)
    if f is None or f.op_type != GN or f.rank != 2:
        return None
    node = gemm_out.producer()
    if node.op_type == "Gemm":
        if (float(attr(node, "alpha", 1.0)) != 1.0 or int(attr(node, "transA", 0)) != 0
                or (bias is not None and float(attr(node, "beta", 1.0)) != 1.0)):
            return None
        trans_b = int(attr(node, "transB", 0))
    else:
        trans_b = 0
    if a.dtype != f.x_dtype or w.dtype != f.x_dtype or rank(a) != 2 or rank(w) != 2:
        return None
    c = w.shape[0] if trans_b else w.shape[1]
    if c != f.channels:
        return None
    if node.op_type == "Gemm":
        b_in = _bias_input(bias, 2, c)
        return None if b_in is None else _gemm_fused(f, a, w, b_in, trans_b, False, 2)
    return _gemm_fused(f, a, w, np.zeros(c, np.float32), 0, True, 2)


def _is_row_flatten(flat: ir.Value, z: ir.Value, c: int) -> bool:
    """flat = Reshape(z) is z (…, C) viewed as (M, C): any reshape of (…, C) to (M, C) keeps rows and columns."""
    node = flat.producer()
    if rank(z) is None or rank(z) < 2 or z.shape[-1] != c or int(attr(node, "allowzero", 0)) not in (0, 1):
        return False
    target = const(node.inputs[1]) if len(node.inputs) > 1 else None
    if target is not None:
        t = [int(v) for v in target.reshape(-1)]
        return len(t) == 2 and t[1] == c and t[0] != 0
    return rank(flat) == 2 and flat.shape[1] == c


def token_gemm_plan(a, w, zflat, mm, fused, bias=None, **_) -> Fused | None:
    """MatMul(a (…, K), w (K, C)) [+ bias] → Reshape to (M, C) → rank-2 GroupNormAct: GemmGroupNormAct of
    Reshape(a, (-1, K))."""
    f = read_fused(fused)
    if f is None or f.op_type != GN or f.rank != 2:
        return None
    z = mm if bias is None else zflat.producer().inputs[0]
    c = f.channels
    if a.dtype != f.x_dtype or w.dtype != f.x_dtype or rank(a) is None or rank(a) < 3 or rank(w) != 2:
        return None
    k = a.shape[-1]
    if not isinstance(k, int) or w.shape[0] != k or w.shape[1] != c or not _is_row_flatten(zflat, z, c):
        return None
    b_in = _bias_input(bias, rank(z), c)
    if b_in is None:
        return None
    return _gemm_fused(f, Flatten(a, k), w, b_in, 0, bias is None, 2)


def _same_dims(want: list, got: ir.Shape | None) -> bool:
    if got is None or len(got) != len(want):
        return False
    for d, e in zip(got, want):
        if isinstance(d, ir.SymbolicDim) or isinstance(e, ir.SymbolicDim):
            if not (isinstance(d, ir.SymbolicDim) and isinstance(e, ir.SymbolicDim) and d.value is not None
                    and d.value == e.value):
                return False
        elif d != e:
            return False
    return True


def _reshapes_to(out: ir.Value, target: ir.Value, want: list) -> bool:
    """Reshape(…, target) = out has the shape ``want``: a constant target equal to ``want`` where it is not -1
    (at most one -1; the element count fixes that one), else out's shape as inferred."""
    t = const(target)
    if t is not None:
        t = [int(v) for v in t.reshape(-1)]
        if len(t) != len(want) or t.count(-1) > 1 or 0 in t:
            return False
        return all(tv == -1 or (isinstance(wv, int) and tv == wv) for tv, wv in zip(t, want))
    return _same_dims(want, out.shape)


def unflatten_plan(fused, target, out, **_) -> Fused | None:
    """Reshape(GemmGroupNormAct(Reshape(a, (-1, K))), (…a's rows, C)) → GemmGroupNormAct(a)."""
    f = read_fused(fused)
    if f is None or f.op_type != GEMM_GN or f.rank != 2:
        return None
    flat = f.inputs[0]
    node = flat.producer()
    if node is None or node.op_type != "Reshape" or node.domain != "":
        return None
    a = node.inputs[0]
    if rank(a) is None or rank(a) < 3 or a.dtype != flat.dtype:
        return None
    k = a.shape[-1]
    if not isinstance(k, int) or not _is_row_flatten(flat, a, k):
        return None
    want = list(a.shape)[:-1] + [1 if f.attrs.reduce else f.channels]
    if not _reshapes_to(out, target, want):
        return None
    return Fused(GEMM_GN, f.attrs, [a, *f.inputs[1:]], rank(a), f.channels, f.origins)


def gemm_rules(fuser) -> list[orp.RewriteRule]:
    def gemm_target(op, a, w):
        g = op.Gemm(a, w, var("bias", optional=True), _allow_other_attributes=True, _outputs=["gemm_out"])
        return _fused_node(op, GN, g)

    def matmul_target(op, a, w):
        return _fused_node(op, GN, op.MatMul(a, w, _outputs=["gemm_out"]))

    def token_target(op, a, w, s):
        return _fused_node(op, GN, op.Reshape(op.MatMul(a, w, _outputs=["mm"]), s, _allow_other_attributes=True,
                                              _outputs=["zflat"]))

    def token_bias_target(op, a, w, s, bias):
        z = op.Add(op.MatMul(a, w, _outputs=["mm"]), bias)
        return _fused_node(op, GN, op.Reshape(z, s, _allow_other_attributes=True, _outputs=["zflat"]))

    def unflatten_target(op, target):
        return op.Reshape(_fused_node(op, GEMM_GN), target, _allow_other_attributes=True, _outputs=["out"])

    rules = [orp.RewriteRule(t, lambda op, **b: fuser.emit(op, gemm_plan(**b), b["fused"]),
                             lambda ctx, **b: gemm_plan(**b) is not None, name=n)
             for t, n in ((gemm_target, "fold_gemm"), (matmul_target, "fold_matmul"))]
    token = [orp.RewriteRule(t, lambda op, **b: fuser.emit(op, token_gemm_plan(**b), b["fused"]),
                             lambda ctx, **b: token_gemm_plan(**b) is not None, name=n)
             for t, n in ((token_bias_target, "fold_token_matmul_bias"), (token_target, "fold_token_matmul"))]
    rules += list(token[0].commute()) + [token[1]]
    rules.append(orp.RewriteRule(unflatten_target, lambda op, **b: fuser.emit(op, unflatten_plan(**b), b["out"]),
                                 lambda ctx, **b: unflatten_plan(**b) is not None, name="unflatten_gemm_rows"))
    return rules


# ---------------------------------------------------------------------------------------------------------------------
# 16-bit X cast up to float32 around a GroupNormAct
# ---------------------------------------------------------------------------------------------------------------------

def cast_pair_plan(x, fused, out, **_) -> Fused | None:
    f = read_fused(fused)
    if f is None or f.op_type != GN or x.dtype not in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return None
    cast_in = f.inputs[0].producer()
    if int(attr(cast_in, "to", 0)) != ir.DataType.FLOAT or int(attr(out.producer(), "to", 0)) != x.dtype:
        return None
    f.inputs[0] = x
    return f


def cast_pair_rule(fuser) -> orp.RewriteRule:
    def target(op, x):
        y = _fused_node(op, GN, op.Cast(x, _allow_other_attributes=True, _outputs=["cast_in"]))
        return op.Cast(y, _allow_other_attributes=True, _outputs=["out"])

    return orp.RewriteRule(target, lambda op, **b: fuser.emit(op, cast_pair_plan(**b), b["out"]),
                           lambda ctx, **b: cast_pair_plan(**b) is not None, name="absorb_16bit_casts")


def grow_rules(fuser) -> orp.RewriteRuleSet:
    rules: list[orp.RewriteRule] = []
    for sp in STEP_PATTERNS:
        rules += step_rules(fuser, sp, GN, "pre")
        for op_type in GROWN_BY_DEFAULT:
            rules += step_rules(fuser, sp, op_type, "post")
    for op_type in GROWN_BY_DEFAULT:
        rules += [reduce_rule(fuser, op_type, reduce_op, reduce, axes_input)
                  for reduce_op, reduce in REDUCE_OPS.items() for axes_input in (True, False)]
    rules += gemm_rules(fuser)
    rules.append(cast_pair_rule(fuser))
    return orp.RewriteRuleSet(rules)

