"""Fuse GroupNorm and the elementwise chains / GEMM / channel reduction around it into ``fusedops`` nodes.

Built on the onnxscript rewriter: every rule is a pattern function, a check and a replacement, generated from the
data tables below. The fuser runs in three phases:

1. *core*: each GroupNorm becomes a ``GroupNormAct`` node with empty chains. Recognised forms: torch's export
   (Reshape(0, G, -1) → InstanceNormalization(ones, zeros) → Reshape(Shape(x)) [→ Mul(gamma) → Add(beta)]) and
   ONNX ``GroupNormalization`` (opset 18-20: scale/bias per group, expanded to per channel; opset 21+: per channel).
2. *grow*, to a fixed point: absorb one elementwise step before (``pre``) or after (``post``) the fused node, a
   channel reduction after it (``reduce``), or a producing Gemm / MatMul (→ ``GemmGroupNormAct``). The rewriter only
   replaces a match when its intermediate values have no other consumer and are not graph outputs, so only
   single-consumer intermediates are fused, and the first unsupported op stops a chain.
3. *finish*: validate each node with ``catalog.parse_attrs``, attach one standard-op FunctionProto per distinct node
   configuration (IR-10 overloads, see ``functions.py``), add the ``fusedops`` opset, check the model.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import onnx
import onnx_ir as ir
import onnxscript.optimizer
from onnxscript.rewriter import _pattern_ir
from onnxscript.rewriter import pattern as orp

from fusedops import catalog
from fusedops.errors import FusedopsError

from . import functions, validate

DOMAIN = catalog.DOMAIN
GN = catalog.GROUP_NORM_ACT.name
GEMM_GN = catalog.GEMM_GROUP_NORM_ACT.name
FUSED_OPS = (GN, GEMM_GN)
_MAX_GROW_PASSES = 200  # each pass absorbs at least one op; chains are capped at catalog.MAX_STEPS anyway


def _var(name: str, optional: bool = False) -> _pattern_ir.Var:
    return _pattern_ir.Var(name, can_match_none=optional)


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


def _const(v: ir.Value | None) -> np.ndarray | None:
    if v is None or v.const_value is None:
        return None
    try:
        return np.asarray(v.const_value.numpy())
    except Exception:  # external data that is not available
        return None


def _rank(v: ir.Value | None) -> int | None:
    return None if v is None or v.shape is None else v.shape.rank()


def _is_float32(v: ir.Value | None) -> bool:
    return v is not None and v.dtype == ir.DataType.FLOAT


# ---------------------------------------------------------------------------------------------------------------------
# The state of one fused node while it grows
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class _Fused:
    """A fused node's op, attributes and inputs; new tensors (np arrays) become initializers on emission."""

    op_type: str
    attrs: catalog.FusedAttrs
    inputs: list  # ir.Value | np.ndarray, in catalog order, then extras
    rank: int  # rank of the normalized tensor (X for GroupNormAct, 2 for GemmGroupNormAct)
    channels: int

    @property
    def fixed(self) -> int:
        return len(catalog.OPS[self.op_type].inputs)

    @property
    def extras(self) -> list:
        return self.inputs[self.fixed:]

    def add_extra(self, array: np.ndarray) -> int:
        self.inputs.append(np.asarray(array, dtype=np.float32).reshape(-1))
        return len(self.inputs) - self.fixed - 1

    def fits(self) -> bool:
        a = self.attrs
        return (len(a.pre) <= catalog.MAX_STEPS and len(a.post) <= catalog.MAX_STEPS
                and len(self.extras) <= catalog.MAX_EXTRAS)


def _output_shape(f: _Fused) -> ir.Shape | None:
    """The fused node's output shape from its input X (for outputs the original graph left without a shape)."""
    x = f.inputs[0]
    if not isinstance(x, ir.Value) or x.shape is None:
        return None
    dims = list(x.shape)
    if f.op_type == GEMM_GN:
        dims[-1] = f.channels
        axis = len(dims) - 1
    else:
        axis = 1
    if f.attrs.reduce:
        dims[axis] = 1
    return ir.Shape(dims)


def _read_fused(value: ir.Value | None) -> _Fused | None:
    node = value.producer() if value is not None else None
    if node is None or node.domain != DOMAIN or node.op_type not in FUSED_OPS:
        return None
    attrs = {k: a.value for k, a in node.attributes.items()}
    fa = catalog.parse_attrs(node.op_type, attrs)
    inputs = list(node.inputs)
    gamma = inputs[catalog.OPS[node.op_type].inputs.index("gamma")]
    rank = _rank(inputs[0]) if node.op_type == GN else 2
    c = gamma.shape[0] if gamma is not None and gamma.shape is not None else None
    if rank is None or not isinstance(c, int):
        return None
    return _Fused(node.op_type, fa, inputs, rank, c)


# ---------------------------------------------------------------------------------------------------------------------
# Constants as chain operands
# ---------------------------------------------------------------------------------------------------------------------

def _channel_vector(arr: np.ndarray | None, rank: int, channels: int, axis: int = 1) -> np.ndarray | None:
    """A constant that broadcasts onto a (.., C, ..) tensor of ``rank`` only along ``axis`` → its (C,) values, or
    None if it would change the tensor's shape or vary along another axis."""
    if arr is None or arr.ndim > rank or not np.issubdtype(arr.dtype, np.floating):
        return None
    if arr.size == 1:
        return np.full((channels,), arr.reshape(()), dtype=np.float32)
    padded = (1,) * (rank - arr.ndim) + arr.shape
    if padded[axis] != channels or any(d != 1 for i, d in enumerate(padded) if i != axis):
        return None
    return arr.reshape(-1).astype(np.float32)


def _operand(arr: np.ndarray | None, rank: int, channels: int) -> float | np.ndarray | None:
    """A scalar (numel 1) or per-channel constant operand, else None."""
    if arr is None or arr.ndim > rank or not np.issubdtype(arr.dtype, np.floating):
        return None
    if arr.size == 1:
        v = float(arr.reshape(()))
        return None if math.isnan(v) else v
    return _channel_vector(arr, rank, channels)


def _close(arr: np.ndarray | None, want: float, rel: float = 1e-6) -> bool:
    return arr is not None and arr.size == 1 and math.isclose(float(arr.reshape(())), want, rel_tol=rel,
                                                              abs_tol=1e-7)


# ---------------------------------------------------------------------------------------------------------------------
# Elementwise steps as patterns. graph(op, x) builds the step from x; its last node's output is named "out".
# extract(b, rank, C) returns (step name, params, operand) or None; b holds the bound pattern values.
# ---------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _StepPattern:
    key: str
    graph: Callable
    extract: Callable
    commute: bool = False  # expand commutative Add/Mul orderings (decomposed forms)


def _binary(key: str, op_type: str, step: str, const_first: bool) -> _StepPattern:
    def graph(op, x):
        c = _var("c1")
        args = (c, x) if const_first else (x, c)
        return getattr(op, op_type)(*args, _outputs=["out"])

    def extract(b, rank, channels):
        v = _operand(_const(b.get("c1")), rank, channels)
        return None if v is None else (step, (), v)

    return _StepPattern(key, graph, extract)


def _unary(key: str, op_type: str, step: str, params: Callable | None = None) -> _StepPattern:
    def graph(op, x):
        return getattr(op, op_type)(x, _allow_other_attributes=True, _outputs=["out"])

    def extract(b, rank, channels):
        p = () if params is None else params(b["out"].producer())
        return None if p is None else (step, tuple(p), None)

    return _StepPattern(key, graph, extract)


def _clip_graph(op, x):
    return op.Clip(x, _var("c1", optional=True), _var("c2", optional=True), _outputs=["out"])


def _clip_extract(b, rank, channels):
    bounds = []
    for name, inf in (("c1", -math.inf), ("c2", math.inf)):
        v = b.get(name)
        if v is None:
            bounds.append(inf)
            continue
        arr = _const(v)
        if arr is None or arr.size != 1 or math.isnan(float(arr.reshape(()))):
            return None
        bounds.append(float(arr.reshape(())))
    return ("hardtanh", tuple(bounds), None)


def _gelu_params(node: ir.Node):
    approx = _attr(node, "approximate", "none")
    return {"none": "gelu", "tanh": "gelu_tanh"}.get(approx)


def _gelu_op_extract(b, rank, channels):
    name = _gelu_params(b["out"].producer())
    return None if name is None else (name, (), None)


def _silu_graph(op, x):
    return op.Mul(x, op.Sigmoid(x), _outputs=["out"])


def _mish_graph(op, x):
    return op.Mul(x, op.Tanh(op.Softplus(x)), _outputs=["out"])


def _softplus_threshold_graph(op, x):
    """torch's export of F.softplus(x) (beta 1): Where(x > threshold, x, Softplus(x))."""
    return op.Where(op.Greater(x, _var("c_thr")), x, op.Softplus(x), _outputs=["out"])


def _softplus_beta_graph(op, x):
    """torch's export of F.softplus(x, beta, threshold): Where(x*beta > threshold, x, Softplus(x*beta) / beta)."""
    scaled = op.Mul(x, _var("c_beta"))
    return op.Where(op.Greater(scaled, _var("c_thr")), x, op.Div(op.Softplus(scaled), _var("c_beta2")),
                    _outputs=["out"])


def _softplus_extract(b, rank, channels):
    thr = _const(b.get("c_thr"))
    if thr is None or thr.size != 1:
        return None
    beta = 1.0
    if b.get("c_beta") is not None:
        c1, c2 = _const(b.get("c_beta")), _const(b.get("c_beta2"))
        if c1 is None or c2 is None or c1.size != 1 or c2.size != 1 or float(c1.reshape(())) != float(
                c2.reshape(())) or float(c1.reshape(())) <= 0:
            return None
        beta = float(c1.reshape(()))
    return ("softplus", (beta, float(thr.reshape(()))), None)


def _half_x_times(op, x, one_plus, form: int):
    """0.5 * x * one_plus in the three association orders exporters produce."""
    half = _var("c_half")
    if form == 0:
        return op.Mul(op.Mul(x, half), one_plus, _outputs=["out"])
    if form == 1:
        return op.Mul(x, op.Mul(one_plus, half), _outputs=["out"])
    return op.Mul(op.Mul(x, one_plus), half, _outputs=["out"])


def _erf_gelu(form: int, scale_op: str) -> _StepPattern:
    def graph(op, x):
        scaled = getattr(op, scale_op)(x, _var("c_sqrt"))
        return _half_x_times(op, x, op.Add(op.Erf(scaled), _var("c_one")), form)

    def extract(b, rank, channels):
        want = math.sqrt(2.0) if scale_op == "Div" else 1.0 / math.sqrt(2.0)
        ok = (_close(_const(b.get("c_sqrt")), want) and _close(_const(b.get("c_half")), 0.5)
              and _close(_const(b.get("c_one")), 1.0))
        return ("gelu", (), None) if ok else None

    return _StepPattern(f"gelu_erf_{scale_op.lower()}_{form}", graph, extract, commute=True)


def _tanh_gelu(form: int, cube: str) -> _StepPattern:
    def graph(op, x):
        x3 = op.Pow(x, _var("c_three")) if cube == "pow" else op.Mul(op.Mul(x, x), x)
        inner = op.Mul(op.Add(x, op.Mul(x3, _var("c_coef"))), _var("c_k"))
        return _half_x_times(op, x, op.Add(op.Tanh(inner), _var("c_one")), form)

    def extract(b, rank, channels):
        ok = (_close(_const(b.get("c_k")), math.sqrt(2.0 / math.pi), 1e-5)
              and _close(_const(b.get("c_coef")), 0.044715, 1e-5) and _close(_const(b.get("c_half")), 0.5)
              and _close(_const(b.get("c_one")), 1.0)
              and (cube != "pow" or _close(_const(b.get("c_three")), 3.0)))
        return ("gelu_tanh", (), None) if ok else None

    return _StepPattern(f"gelu_tanh_{cube}_{form}", graph, extract, commute=True)


# Multi-op forms first: at one root the first matching rule wins, and a decomposed GELU ends in a Mul by 0.5 that
# the plain "mul" rule would otherwise take on its own.
STEP_PATTERNS: list[_StepPattern] = [
    *[_erf_gelu(form, scale_op) for form in range(3) for scale_op in ("Div", "Mul")],
    *[_tanh_gelu(form, cube) for form in range(3) for cube in ("pow", "mul")],
    _StepPattern("silu", _silu_graph, lambda b, r, c: ("silu", (), None), commute=True),
    _StepPattern("mish_decomposed", _mish_graph, lambda b, r, c: ("mish", (), None), commute=True),
    _StepPattern("softplus_threshold", _softplus_threshold_graph, _softplus_extract),
    _StepPattern("softplus_beta", _softplus_beta_graph, _softplus_extract, commute=True),
    _StepPattern("add_self", lambda op, x: op.Add(x, x, _outputs=["out"]), lambda b, r, c: ("mul", (), 2.0)),
    _binary("add", "Add", "add", False), _binary("add_l", "Add", "add", True),
    _binary("sub", "Sub", "sub", False), _binary("rsub", "Sub", "rsub", True),
    _binary("mul", "Mul", "mul", False), _binary("mul_l", "Mul", "mul", True),
    _binary("div", "Div", "div", False), _binary("rdiv", "Div", "rdiv", True),
    _unary("relu", "Relu", "relu"),
    _StepPattern("reciprocal", lambda op, x: op.Reciprocal(x, _outputs=["out"]), lambda b, r, c: ("rdiv", (), 1.0)),
    _unary("leaky_relu", "LeakyRelu", "leaky_relu", lambda n: (float(_attr(n, "alpha", 0.01)),)),
    _unary("sigmoid", "Sigmoid", "sigmoid"),
    _unary("tanh", "Tanh", "tanh"),
    _unary("hardsigmoid", "HardSigmoid", "hardsigmoid",
           lambda n: (float(_attr(n, "alpha", 0.2)), float(_attr(n, "beta", 0.5)))),
    _unary("hardswish", "HardSwish", "hardswish"),
    _unary("mish", "Mish", "mish"),
    _unary("softplus", "Softplus", "softplus", lambda n: (1.0, 20.0)),
    _StepPattern("gelu_op", lambda op, x: op.Gelu(x, _allow_other_attributes=True, _outputs=["out"]),
                 _gelu_op_extract),
    _StepPattern("clip", _clip_graph, _clip_extract),
]

REDUCE_OPS = {"ReduceMin": "min", "ReduceMax": "max", "ReduceSum": "sum", "ReduceMean": "mean",
              "ReduceLogSumExp": "logsumexp"}


# ---------------------------------------------------------------------------------------------------------------------
# The rule factory (rules need per-model state: opset, fresh names)
# ---------------------------------------------------------------------------------------------------------------------

class _Fuser:
    """Owns the rules (built once: the commuted variants are costly) and the state of the model being fused."""

    def __init__(self):
        self.opset: int | None = None
        self._used_names: set[str] = set()
        self._n = 0
        self._core: list[orp.RewriteRuleSet] | None = None
        self._grow: orp.RewriteRuleSet | None = None

    def run(self, model: ir.Model) -> None:
        """Phases 1 and 2 on ``model``, in place."""
        self.opset = model.opset_imports.get("", None)
        self._used_names = {v.name for v in _all_values(model.graph)}
        self._n = 0
        if self._core is None:
            self._core = self.core_rule_sets()
            self._grow = self.grow_rules()
        # Dead nodes (e.g. the Shape(x) of torch's GroupNorm) would count as other consumers and block fusion.
        for rule_set in self._core:
            rule_set.apply_to_model(model)
            onnxscript.optimizer.remove_unused_nodes(model)
        for _ in range(_MAX_GROW_PASSES):
            changed = self._grow.apply_to_model(model)
            onnxscript.optimizer.remove_unused_nodes(model)
            if changed == 0:
                break

    # --- emission ------------------------------------------------------------------------------------------------
    def _fresh(self, hint: str) -> str:
        while True:
            name = f"fusedops_{hint}_{self._n}"
            self._n += 1
            if name not in self._used_names:
                self._used_names.add(name)
                return name

    def emit(self, op, f: _Fused, like: ir.Value):
        """Replacement: one fused node from ``f``; its output takes the type and shape of ``like``."""
        names = list(catalog.OPS[f.op_type].inputs) + [f"extra{k}" for k in range(len(f.extras))]
        vals = []
        for name, v in zip(names, f.inputs):
            if isinstance(v, np.ndarray):
                t = ir.tensor(np.ascontiguousarray(v, dtype=np.float32), name=self._fresh(name.lower()))
                v = op.initializer(t, name=t.name)
            vals.append(v)
        out = op.op(f.op_type, *vals, _domain=DOMAIN, _version=catalog.VERSION, **f.attrs.onnx_attrs(f.op_type))
        out.type = like.type if like.type is not None else ir.TensorType(ir.DataType.FLOAT)
        out.shape = like.shape if like.shape is not None else _output_shape(f)
        return out

    # --- phase 1: GroupNorm → GroupNormAct -----------------------------------------------------------------------
    def _gn_input_ok(self, x: ir.Value) -> tuple[int, int] | None:
        r = _rank(x)
        if not _is_float32(x) or r is None or not 2 <= r <= 5 or not isinstance(x.shape[1], int):
            return None
        return r, x.shape[1]

    def _torch_gn_plan(self, x, s1, scale, bias, r1, inorm, s2=None, r2=None, gamma=None, beta=None,
                       **_) -> _Fused | None:
        ok = self._gn_input_ok(x)
        if ok is None:
            return None
        rank, c = ok
        sc, bi, shape1 = _const(scale), _const(bias), _const(s1)
        if sc is None or bi is None or shape1 is None or sc.ndim != 1 or bi.shape != sc.shape:
            return None
        g = sc.size
        if not (np.all(sc == 1) and np.all(bi == 0)) or g == 0 or c % g != 0:
            return None
        if shape1.shape != (3,) or int(shape1[1]) != g or int(shape1[2]) != -1:
            return None
        if int(shape1[0]) != 0 and int(shape1[0]) != x.shape[0]:
            return None
        reshapes = [r1.producer()] + ([r2.producer()] if r2 is not None else [])
        if any(int(_attr(node, "allowzero", 0)) != 0 for node in reshapes):
            return None
        if r2 is None:
            # torch's optimizer drops the Reshape back to x's shape when (N, G, -1) already is that shape
            if not (rank == 3 and g == c):
                return None
        else:
            # the second Reshape restores x's shape: Shape(x), or x's static shape as a constant
            sp = s2.producer()
            if sp is not None and sp.op_type == "Shape" and sp.domain == "":
                if sp.inputs[0] is not x or int(_attr(sp, "start", 0)) != 0 or _attr(sp, "end") is not None:
                    return None
            else:
                shape2 = _const(s2)
                dims = [d if isinstance(d, int) else None for d in x.shape]
                if shape2 is None or None in dims or list(shape2.reshape(-1)) != dims:
                    return None
        if gamma is None:
            gam, bet = np.ones(c, np.float32), np.zeros(c, np.float32)
        else:
            gam = _channel_vector(_const(gamma), rank, c)
            bet = _channel_vector(_const(beta), rank, c)
            if gam is None or bet is None:
                return None
        eps = float(_attr(inorm.producer(), "epsilon", 1e-5))
        return _Fused(GN, catalog.FusedAttrs(num_groups=g, epsilon=eps), [x, gam, bet], rank, c)

    def _torch_gn_rule(self, affine: bool, restore: bool) -> orp.RewriteRule:
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
            return self._torch_gn_plan(**bindings(b)[0]) is not None

        def rewrite(op, **b):
            b, like = bindings(b)
            return self.emit(op, self._torch_gn_plan(**b), like)

        name = f"torch_group_norm{'_affine' if affine else ''}{'' if restore else '_no_restore'}"
        return orp.RewriteRule(target, rewrite, check, name=name)

    def _onnx_gn_plan(self, x, scale, bias, out, **_) -> _Fused | None:
        ok = self._gn_input_ok(x)
        if ok is None:
            return None
        rank, c = ok
        node = out.producer()
        g = int(_attr(node, "num_groups"))
        eps = float(_attr(node, "epsilon", 1e-5))
        per_group = self.opset is not None and self.opset < 21  # GroupNormalization-18: scale/bias per group
        vals = []
        for v in (scale, bias):
            arr = _const(v)
            if arr is not None:
                arr = arr.reshape(-1).astype(np.float32)
                vals.append(np.repeat(arr, c // g) if per_group else arr)
            elif not per_group and v.shape is not None and list(v.shape) == [c] and _is_float32(v):
                vals.append(v)
            else:
                return None
        return _Fused(GN, catalog.FusedAttrs(num_groups=g, epsilon=eps), [x, *vals], rank, c)

    def _onnx_gn_rule(self) -> orp.RewriteRule:
        def target(op, x, scale, bias):
            return op.GroupNormalization(x, scale, bias, _allow_other_attributes=True, _outputs=["out"])

        def check(ctx, **b):
            return self._onnx_gn_plan(**b) is not None

        def rewrite(op, **b):
            return self.emit(op, self._onnx_gn_plan(**b), b["out"])

        return orp.RewriteRule(target, rewrite, check, name="onnx_group_normalization")

    # --- phase 2: grow ------------------------------------------------------------------------------------------
    def _step_rule(self, sp: _StepPattern, op_type: str, where: str) -> list[orp.RewriteRule]:
        def fused_node(op, *inputs):
            return getattr(op, op_type)(*inputs, _domain=DOMAIN, _allow_other_inputs=True,
                                        _allow_other_attributes=True, _outputs=["fused"])

        if where == "post":
            def target(op):
                return sp.graph(op, fused_node(op))
        else:
            def target(op, x):
                return fused_node(op, sp.graph(op, x))

        def plan(b) -> _Fused | None:
            f = _read_fused(b["fused"])
            if f is None:
                return None
            if where == "post" and f.attrs.reduce:
                return None  # post runs before the reduction; nothing can follow a reduction
            if where == "pre":
                x = b["x"]
                if not _is_float32(x) or _rank(x) != f.rank or (x.shape is not None and x.shape[1] != f.channels):
                    return None
            got = sp.extract(b, f.rank, f.channels)
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

        def check(ctx, **b):
            return plan(b) is not None

        def rewrite(op, **b):
            return self.emit(op, plan(b), b["out"] if where == "post" else b["fused"])

        rule = orp.RewriteRule(target, rewrite, check, name=f"{where}_{sp.key}_{op_type}")
        return list(rule.commute()) if sp.commute else [rule]

    def _reduce_rules(self, op_type: str) -> list[orp.RewriteRule]:
        return [self._reduce_rule(op_type, reduce_op, reduce, axes_input)
                for reduce_op, reduce in REDUCE_OPS.items() for axes_input in (True, False)]

    def _reduce_rule(self, op_type: str, reduce_op: str, reduce: str, axes_input: bool) -> orp.RewriteRule:
        def fused_node(op):
            return getattr(op, op_type)(_domain=DOMAIN, _allow_other_inputs=True, _allow_other_attributes=True,
                                        _outputs=["fused"])

        if axes_input:  # opset >= 18 (ReduceSum: >= 13)
            def target(op, axes):
                return getattr(op, reduce_op)(fused_node(op), axes, _allow_other_attributes=True, _outputs=["out"])
        else:
            def target(op):
                return getattr(op, reduce_op)(fused_node(op), _allow_other_attributes=True, _outputs=["out"])

        def plan(b) -> _Fused | None:
            f = _read_fused(b["fused"])
            if f is None or f.attrs.reduce:
                return None
            node = b["out"].producer()
            axes = _const(b.get("axes")) if axes_input else _attr(node, "axes")
            if axes is None or int(_attr(node, "keepdims", 1)) != 1:
                return None
            axes = [int(a) for a in np.asarray(axes).reshape(-1)]
            if [a + f.rank if a < 0 else a for a in axes] != [1]:
                return None
            f.attrs = replace(f.attrs, reduce=reduce)
            return f

        return orp.RewriteRule(target, lambda op, **b: self.emit(op, plan(b), b["out"]),
                               lambda ctx, **b: plan(b) is not None,
                               name=f"reduce_{reduce_op}_{'input' if axes_input else 'attr'}_{op_type}")

    def _gemm_plan(self, a, w, fused, gemm_out, bias=None, **_) -> _Fused | None:
        f = _read_fused(fused)
        if f is None or f.op_type != GN or f.rank != 2:
            return None
        node = gemm_out.producer()
        if node.op_type == "Gemm":
            if (float(_attr(node, "alpha", 1.0)) != 1.0 or int(_attr(node, "transA", 0)) != 0
                    or (bias is not None and float(_attr(node, "beta", 1.0)) != 1.0)):
                return None
            trans_b = int(_attr(node, "transB", 0))
        else:
            trans_b = 0
        if not (_is_float32(a) and _is_float32(w)) or _rank(a) != 2 or _rank(w) != 2:
            return None
        c = w.shape[0] if trans_b else w.shape[1]
        if c != f.channels:
            return None
        pre = list(f.attrs.pre)
        extras = f.extras
        if node.op_type == "Gemm":
            if bias is None:
                b_in = np.zeros(c, np.float32)
            else:
                b_in = _channel_vector(_const(bias), 2, c)
                if b_in is None:
                    if not (_is_float32(bias) and bias.shape is not None and list(bias.shape) == [c]):
                        return None
                    b_in = bias
        else:
            # MatMul: a leading per-column Add becomes the bias
            b_in = np.zeros(c, np.float32)
            if pre and pre[0].name == "add":
                first = pre.pop(0)
                if isinstance(first.operand, int):
                    k = first.operand
                    b_in = extras[k]
                    if not any(s.kind.binary and s.operand == k for s in pre + f.attrs.post):
                        extras = extras[:k] + extras[k + 1:]
                        pre = _renumber(pre, k)
                        f.attrs = replace(f.attrs, post=_renumber(f.attrs.post, k))
                else:
                    b_in = np.full(c, first.operand, np.float32)
        attrs = replace(f.attrs, pre=pre, trans_b=trans_b, allow_tf32=1)
        return _Fused(GEMM_GN, attrs, [a, w, b_in, f.inputs[1], f.inputs[2], *extras], 2, c)

    def _gemm_rules(self) -> list[orp.RewriteRule]:
        def gemm_target(op, a, w):
            g = op.Gemm(a, w, _var("bias", optional=True), _allow_other_attributes=True, _outputs=["gemm_out"])
            return op.GroupNormAct(g, _domain=DOMAIN, _allow_other_inputs=True, _allow_other_attributes=True,
                                   _outputs=["fused"])

        def matmul_target(op, a, w):
            g = op.MatMul(a, w, _outputs=["gemm_out"])
            return op.GroupNormAct(g, _domain=DOMAIN, _allow_other_inputs=True, _allow_other_attributes=True,
                                   _outputs=["fused"])

        return [orp.RewriteRule(t, lambda op, **b: self.emit(op, self._gemm_plan(**b), b["fused"]),
                                lambda ctx, **b: self._gemm_plan(**b) is not None, name=n)
                for t, n in ((gemm_target, "fold_gemm"), (matmul_target, "fold_matmul"))]

    def grow_rules(self) -> orp.RewriteRuleSet:
        rules: list[orp.RewriteRule] = []
        for sp in STEP_PATTERNS:
            rules += self._step_rule(sp, GN, "pre")
            for op_type in FUSED_OPS:
                rules += self._step_rule(sp, op_type, "post")
        for op_type in FUSED_OPS:
            rules += self._reduce_rules(op_type)
        rules += self._gemm_rules()
        return orp.RewriteRuleSet(rules)

    def core_rule_sets(self) -> list[orp.RewriteRuleSet]:
        # The affine form first: otherwise its prefix (the non-affine form) would match and leave Mul/Add as steps.
        return [orp.RewriteRuleSet([self._torch_gn_rule(True, True), self._torch_gn_rule(True, False)], commute=True),
                orp.RewriteRuleSet([self._torch_gn_rule(False, True), self._torch_gn_rule(False, False),
                                    self._onnx_gn_rule()])]


_FUSER = _Fuser()
_FUSER_LOCK = threading.Lock()  # the fuser holds the state of the model being fused


def _renumber(steps: list[catalog.Step], removed: int) -> list[catalog.Step]:
    out = []
    for s in steps:
        if s.kind.binary and isinstance(s.operand, int) and s.operand > removed:
            s = replace(s, operand=s.operand - 1)
        out.append(s)
    return out


def _all_values(graph: ir.Graph):
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph:
        yield from node.outputs


# ---------------------------------------------------------------------------------------------------------------------
# Validation and finishing
# ---------------------------------------------------------------------------------------------------------------------

def _validate_input(model: ir.Model) -> None:
    """Bad GroupNormalization or fusedops nodes are user errors (the model itself is invalid), not silently
    skipped."""
    for node in model.graph:
        if node.domain == DOMAIN:
            where = f"fusedops node {node.name or '(unnamed)'!r}"
            if node.op_type not in FUSED_OPS:
                raise FusedopsError(f"{where}: unknown op {node.op_type!r}; known: {', '.join(FUSED_OPS)}")
            try:
                catalog.parse_attrs(node.op_type, {k: a.value for k, a in node.attributes.items()})
            except catalog.CatalogError as e:
                raise FusedopsError(f"{where}: {e}") from None
            continue
        if node.op_type != "GroupNormalization" or node.domain != "":
            continue
        g = _attr(node, "num_groups")
        x = node.inputs[0]
        c = x.shape[1] if x is not None and x.shape is not None and x.shape.rank() >= 2 else None
        where = f"GroupNormalization node {node.name or '(unnamed)'!r}"
        if g is None or int(g) <= 0:
            raise FusedopsError(f"{where}: num_groups must be a positive integer, got {g}")
        if isinstance(c, int) and c % int(g) != 0:
            raise FusedopsError(f"{where}: channels C={c} is not divisible by num_groups={g}")


def fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.domain == DOMAIN and n.op_type in FUSED_OPS]


def fuse_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` with GroupNorm (+ GEMM, elementwise chains, channel reduction) fused into
    ``fusedops`` nodes, each with a standard-op function body. Unfusible parts stay standard. Raises FusedopsError
    for an invalid model (e.g. C not divisible by num_groups)."""
    if not isinstance(model, onnx.ModelProto):
        raise FusedopsError(f"fuse_model expects an onnx.ModelProto, got {type(model).__name__}")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or not functions.MIN_OPSET <= opset <= functions.MAX_OPSET:
        raise FusedopsError(f"the model's default-domain opset is {opset}; the fuser supports opsets "
                            f"{functions.MIN_OPSET}-{functions.MAX_OPSET}")
    model = validate.checked_input(model, opset)  # every user error named before anything is rewritten
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # shapes only help; an un-inferable model still fuses what has known shapes
        inferred = model
    irm = ir.from_proto(inferred)
    _validate_input(irm)
    with _FUSER_LOCK:
        _FUSER.run(irm)

    # finish: one function per distinct configuration
    fns: dict[tuple[str, str], onnx.FunctionProto] = {}
    for node in irm.graph:
        if node.domain != DOMAIN or node.op_type not in FUSED_OPS:
            continue
        attrs = {k: a.value for k, a in node.attributes.items()}
        try:
            fa = catalog.parse_attrs(node.op_type, attrs)
        except catalog.CatalogError as e:
            raise FusedopsError(str(e)) from None
        rank = _rank(node.inputs[0])  # validated when known; the bodies are rank-generic
        n_extras = len(node.inputs) - len(catalog.OPS[node.op_type].inputs)
        try:
            fn = functions.build_function(node.op_type, fa, rank, opset, n_extras)
        except catalog.CatalogError as e:
            raise FusedopsError(f"fusedops node {node.name or '(unnamed)'!r}: {e}") from None
        node.overload = fn.overload
        fns.setdefault((node.op_type, fn.overload), fn)
    if not fns:
        return inferred if inferred is not model else _copy(model)
    irm.opset_imports[DOMAIN] = catalog.VERSION
    out = ir.to_proto(irm)
    _note_overloads(out, fns)
    out.ir_version = 10  # function overloads need IR 10; later IRs are not accepted by every runtime yet
    # functions of an earlier fusion whose nodes changed are dropped; the others are (re)built from the nodes
    keep = [f for f in out.functions if f.domain != DOMAIN]
    del out.functions[:]
    out.functions.extend(keep)
    out.functions.extend(fn for _, fn in sorted(fns.items()))
    _drop_stale_value_info(out)
    try:
        onnx.checker.check_model(out, full_check=True)
    except onnx.checker.ValidationError as e:  # a fuser bug, not a user error: keep the checker's message
        raise RuntimeError(f"fused model fails the ONNX checker: {e}") from e
    return out


OVERLOAD_NOTE_KEY = "fusedops.function_overloads"


def _note_overloads(model: onnx.ModelProto, fns: dict) -> None:
    """Several function bodies for one op type need a runtime that honours IR-10 overloads when it runs the bodies
    (onnxruntime >= 1.27; 1.21-1.26 silently run one body for all). Say so in the model's metadata and the log."""
    counts: dict[str, int] = {}
    for op_type, _ in fns:
        counts[op_type] = counts.get(op_type, 0) + 1
    multi = {op: n for op, n in counts.items() if n > 1}
    for p in [p for p in model.metadata_props if p.key == OVERLOAD_NOTE_KEY]:
        model.metadata_props.remove(p)
    if not multi:
        return
    text = (", ".join(f"{op}: {n} function overloads" for op, n in sorted(multi.items()))
            + "; running the function bodies needs onnxruntime >= 1.27 (or the fusedops runtime libraries)")
    model.metadata_props.add(key=OVERLOAD_NOTE_KEY, value=text)
    logging.getLogger(__name__).info(text)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def _drop_stale_value_info(model: onnx.ModelProto) -> None:
    """value_info entries for values that no longer exist confuse some tools."""
    live = {o for n in model.graph.node for o in n.output}
    keep = [vi for vi in model.graph.value_info if vi.name in live]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)


def fusion_summary(model: onnx.ModelProto) -> list[tuple[str, dict[str, object]]]:
    """(op_type, attributes) of every fused node, in graph order."""
    out = []
    for n in fused_nodes(model):
        out.append((n.op_type, {a.name: onnx.helper.get_attribute_value(a) if a.type != onnx.AttributeProto.STRING
                                else a.s.decode() for a in n.attribute}))
    return out
