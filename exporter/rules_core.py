"""Phase 1 of the fuser: each GroupNorm becomes a ``GroupNormAct`` node with empty chains.

Recognised forms:
- torch's export: Reshape(x, [0, G, -1]) → InstanceNormalization(ones, zeros) → Reshape(Shape(x)) [→ Mul(gamma) →
  Add(beta)], the restoring Reshape a constant of x's static shape or absent when it would be a no-op;
- the same for a *token* GroupNorm whose flatten of x (…, C) to (M, C) torch merged into GroupNorm's first Reshape
  (x → Reshape([M | -1, G, C/G]) → InstanceNormalization → Reshape([M | -1, C]) …): the fused node gets an explicit
  Reshape(x, [-1, C]) in front, so it is the same rank-2 GroupNormAct as the unmerged export;
- ONNX ``GroupNormalization`` (opset 18-20: scale / bias per group, expanded to per channel; 21+: per channel).

Every plan returns a ``Fused`` or, when the match cannot be fused, the reason (a string the report shows).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusedops import catalog

from .rule_util import FLOAT_TYPES, GN, Flatten, Fused, attr, channel_vector, const, rank

SITE_KEY = "fusedops.site"  # node metadata: the id of a GroupNorm site (set before fusing, read for the report)


def site_of(node: ir.Node | None) -> tuple:
    return () if node is None or SITE_KEY not in node.meta else (node.meta[SITE_KEY],)


def gn_input_problem(x: ir.Value | None) -> str | None:
    """Why a GroupNorm input cannot be fused (dtype, rank, channel count), or None."""
    if x is None:
        return "the input is missing"
    if x.dtype not in FLOAT_TYPES:
        return f"input dtype {x.dtype.name if x.dtype is not None else 'unknown'} is not supported " \
               f"(float32, float16, bfloat16 are)"
    r = rank(x)
    if r is None:
        return "the input's rank is unknown (no shape information)"
    lo, hi = catalog.GROUP_NORM_ACT.x_rank
    if not lo <= r <= hi:
        return f"input rank {r} is not supported ({lo}-{hi})"
    if not isinstance(x.shape[1], int):
        return f"the channel count (dim 1 of {x.name!r}) is dynamic"
    return None


def _reshape_allowzero(*values: ir.Value | None) -> bool:
    return any(v is not None and v.producer() is not None and int(attr(v.producer(), "allowzero", 0)) != 0
               for v in values)


def _merged_token_flatten(x: ir.Value, shape1: np.ndarray, g: int, s2: ir.Value | None) -> int | str:
    """C when x (…, C) → Reshape(shape1) → InstanceNorm → Reshape(s2) is a GroupNorm of x's rows (…) with torch's
    flatten merged into the first Reshape; else the reason."""
    dims = list(x.shape)
    c = dims[-1]
    if len(dims) < 3 or not isinstance(c, int) or c % g != 0:
        return "the first Reshape does not split x into (N, G, -1)"
    lead = dims[:-1]
    m = math.prod(lead) if all(isinstance(d, int) for d in lead) else None
    a, gg, b = (int(v) for v in shape1)
    if gg != g or not ((a == -1 and b == c // g) or (m is not None and a == m and b in (c // g, -1))):
        return "the first Reshape does not split x into (N, G, -1) nor its rows into (M, G, C/G)"
    shape2 = const(s2)
    if shape2 is None or shape2.shape != (2,) or int(shape2[1]) != c or int(shape2[0]) not in (-1, m):
        return "the Reshape after InstanceNormalization does not restore x's shape nor its rows (M, C)"
    return c


def torch_gn_plan(x, s1, scale, bias, r1, inorm, s2=None, r2=None, gamma=None, beta=None, **_) -> Fused | str:
    problem = gn_input_problem(x)
    if problem is not None and not (x is not None and x.dtype in FLOAT_TYPES and rank(x) is not None
                                    and rank(x) >= 3 and isinstance(x.shape[-1], int)):
        return problem
    sc, bi, shape1 = const(scale), const(bias), const(s1)
    if sc is None or bi is None:
        return "InstanceNormalization's scale / bias are not constant"
    if sc.ndim != 1 or bi.shape != sc.shape or not (np.all(sc == 1) and np.all(bi == 0)):
        return "InstanceNormalization's scale / bias are not ones / zeros (an instance norm, not a GroupNorm)"
    g = sc.size
    if shape1 is None or shape1.shape != (3,):
        return "the Reshape before InstanceNormalization has no constant 3-element shape"
    if _reshape_allowzero(r1, r2):
        return "a Reshape has allowzero=1"
    r = rank(x)
    x_flat = x
    if problem is None and int(shape1[1]) == g and int(shape1[2]) == -1 and int(shape1[0]) in (0, x.shape[0]):
        c = x.shape[1]
        if g == 0 or c % g != 0:
            return f"channels C={c} are not divisible by the {g} groups"
        if r2 is None:
            # torch's optimizer drops the Reshape back to x's shape when (N, G, -1) already is that shape
            if not (r == 3 and g == c):
                return "the InstanceNormalization output is not reshaped back to x's shape"
        else:
            sp = s2.producer()
            if sp is not None and sp.op_type == "Shape" and sp.domain == "":
                if sp.inputs[0] is not x or int(attr(sp, "start", 0)) != 0 or attr(sp, "end") is not None:
                    return "the Reshape after InstanceNormalization does not restore x's shape"
            else:
                shape2 = const(s2)
                dims = [d if isinstance(d, int) else None for d in x.shape]
                if shape2 is None or None in dims or list(shape2.reshape(-1)) != dims:
                    return "the Reshape after InstanceNormalization does not restore x's shape"
    else:
        if r2 is None:
            return "the first Reshape does not split x into (N, G, -1)"
        c = _merged_token_flatten(x, shape1, g, s2)
        if isinstance(c, str):
            return problem or c
        x_flat, r = Flatten(x, c), 2
    if gamma is None:
        gam, bet = np.ones(c, np.float32), np.zeros(c, np.float32)
    else:
        gam = channel_vector(const(gamma), r, c)
        bet = channel_vector(const(beta), r, c)
        if gam is None or bet is None:
            return "gamma / beta are not constants along the channel axis only"
    eps = float(attr(inorm.producer(), "epsilon", 1e-5))
    return Fused(GN, catalog.FusedAttrs(num_groups=g, epsilon=eps), [x_flat, gam, bet], r, c,
                 site_of(inorm.producer()))


def onnx_gn_plan(opset: int | None, x, scale, bias, out, **_) -> Fused | str:
    problem = gn_input_problem(x)
    if problem is not None:
        return problem
    r, c = rank(x), x.shape[1]
    node = out.producer()
    g = int(attr(node, "num_groups"))
    eps = float(attr(node, "epsilon", 1e-5))
    per_group = opset is not None and opset < 21  # GroupNormalization-18: scale/bias per group
    vals = []
    for v in (scale, bias):
        arr = const(v)
        if arr is not None:
            arr = arr.reshape(-1).astype(np.float32)
            vals.append(np.repeat(arr, c // g) if per_group else arr)
        elif not per_group and v is not None and v.shape is not None and list(v.shape) == [c] \
                and v.dtype in FLOAT_TYPES:
            vals.append(v)  # a non-float32 one is cast on emission
        else:
            return ("scale / bias are per group (opset < 21) and not constant" if per_group
                    else "scale / bias are neither constant nor (C,) float tensors")
    return Fused(GN, catalog.FusedAttrs(num_groups=g, epsilon=eps), [x, *vals], r, c, site_of(node))


def torch_gn_rule(fuser, affine: bool, restore: bool) -> orp.RewriteRule:
    def target(op, x, s1, scale, bias, s2, gamma, beta):
        r1 = op.Reshape(x, s1, _allow_other_attributes=True, _outputs=["r1"])
        y = op.InstanceNormalization(r1, scale, bias, _allow_other_attributes=True, _outputs=["inorm"])
        if restore:
            y = op.Reshape(y, s2, _allow_other_attributes=True, _outputs=["r2"])
        return op.Add(op.Mul(y, gamma), beta, _outputs=["gn_out"]) if affine else y

    def bindings(b):
        b = dict(b)
        like = b["gn_out"] if affine else b["r2"] if restore else b["inorm"]
        if not affine:
            b.pop("gamma", None), b.pop("beta", None)
        if not restore:
            b.pop("s2", None), b.pop("r2", None)
        return b, like

    def check(ctx, **b):
        return isinstance(torch_gn_plan(**bindings(b)[0]), Fused)

    def rewrite(op, **b):
        b, like = bindings(b)
        return fuser.emit(op, torch_gn_plan(**b), like)

    name = f"torch_group_norm{'_affine' if affine else ''}{'' if restore else '_no_restore'}"
    return orp.RewriteRule(target, rewrite, check, name=name)


def onnx_gn_rule(fuser) -> orp.RewriteRule:
    def target(op, x, scale, bias):
        return op.GroupNormalization(x, scale, bias, _allow_other_attributes=True, _outputs=["out"])

    def check(ctx, **b):
        return isinstance(onnx_gn_plan(fuser.opset, **b), Fused)

    def rewrite(op, **b):
        return fuser.emit(op, onnx_gn_plan(fuser.opset, **b), b["out"])

    return orp.RewriteRule(target, rewrite, check, name="onnx_group_normalization")


def core_rule_sets(fuser) -> list[orp.RewriteRuleSet]:
    # The affine form first: otherwise its prefix (the non-affine form) would match and leave Mul/Add as steps.
    return [orp.RewriteRuleSet([torch_gn_rule(fuser, True, True), torch_gn_rule(fuser, True, False)], commute=True),
            orp.RewriteRuleSet([torch_gn_rule(fuser, False, True), torch_gn_rule(fuser, False, False),
                                onnx_gn_rule(fuser)])]
