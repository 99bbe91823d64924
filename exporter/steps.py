"""Elementwise chain steps as onnxscript patterns: the ONNX forms the fuser recognises for each catalog step.

Generated from the op spec: a step's ``onnx_op`` (one standard op) and, unless the spec says ``fuser = "hand"`` or
``"onnx_op"``, its formula's expansion (the same ONNX form its function body has). Written by hand: binary steps
(constant operands) and the exporter idioms of silu, mish, softplus, GELU and Clip.

``graph(op, x)`` builds the step from ``x`` (its last node's output is named "out"); ``extract(b, rank, C, axis)``
returns (step name, params, operand) or None, where ``b`` holds the bound pattern values and ``axis`` is the channel
axis of the tensor the step runs on (1, or the last axis after a GEMM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx_ir as ir

from fusedops import catalog

from . import formula_onnx
from .rule_util import attr, close, const, operand, var


def _scalar(arr: np.ndarray) -> float:
    return float(arr.reshape(()).astype(np.float64))


@dataclass(frozen=True)
class StepPattern:
    key: str
    graph: Callable
    extract: Callable
    commute: bool = False  # expand commutative Add/Mul orderings (decomposed forms)


def _binary(key: str, op_type: str, step: str, const_first: bool) -> StepPattern:
    def graph(op, x):
        c = var("c1")
        args = (c, x) if const_first else (x, c)
        return getattr(op, op_type)(*args, _outputs=["out"])

    def extract(b, rank, channels, axis):
        v = operand(const(b.get("c1")), rank, channels, axis)
        return None if v is None else (step, (), v)

    return StepPattern(key, graph, extract)


def _unary(key: str, op_type: str, step: str, params: Callable | None = None) -> StepPattern:
    def graph(op, x):
        return getattr(op, op_type)(x, _allow_other_attributes=True, _outputs=["out"])

    def extract(b, rank, channels, axis):
        p = () if params is None else params(b["out"].producer())
        return None if p is None else (step, tuple(p), None)

    return StepPattern(key, graph, extract)


def _clip_graph(op, x):
    return op.Clip(x, var("c1", optional=True), var("c2", optional=True), _outputs=["out"])


def _clip_extract(b, rank, channels, axis):
    bounds = []
    for name, inf in (("c1", -math.inf), ("c2", math.inf)):
        v = b.get(name)
        if v is None:
            bounds.append(inf)
            continue
        arr = const(v)
        if arr is None or arr.size != 1 or math.isnan(_scalar(arr)):
            return None
        bounds.append(_scalar(arr))
    return ("hardtanh", tuple(bounds), None)


def _gelu_params(node: ir.Node):
    approx = attr(node, "approximate", "none")
    return {"none": "gelu", "tanh": "gelu_tanh"}.get(approx)


def _gelu_op_extract(b, rank, channels, axis):
    name = _gelu_params(b["out"].producer())
    return None if name is None else (name, (), None)


def _silu_graph(op, x):
    return op.Mul(x, op.Sigmoid(x), _outputs=["out"])


def _mish_graph(op, x):
    return op.Mul(x, op.Tanh(op.Softplus(x)), _outputs=["out"])


def _softplus_threshold_graph(op, x):
    """torch's export of F.softplus(x) (beta 1): Where(x > threshold, x, Softplus(x))."""
    return op.Where(op.Greater(x, var("c_thr")), x, op.Softplus(x), _outputs=["out"])


def _softplus_beta_graph(op, x):
    """torch's export of F.softplus(x, beta, threshold): Where(x*beta > threshold, x, Softplus(x*beta) / beta)."""
    scaled = op.Mul(x, var("c_beta"))
    return op.Where(op.Greater(scaled, var("c_thr")), x, op.Div(op.Softplus(scaled), var("c_beta2")),
                    _outputs=["out"])


def _softplus_extract(b, rank, channels, axis):
    thr = const(b.get("c_thr"))
    if thr is None or thr.size != 1:
        return None
    beta = 1.0
    if b.get("c_beta") is not None:
        c1, c2 = const(b.get("c_beta")), const(b.get("c_beta2"))
        if (c1 is None or c2 is None or c1.size != 1 or c2.size != 1 or _scalar(c1) != _scalar(c2)
                or _scalar(c1) <= 0):
            return None
        beta = _scalar(c1)
    return ("softplus", (beta, _scalar(thr)), None)


def _half_x_times(op, x, one_plus, form: int):
    """0.5 * x * one_plus in the three association orders exporters produce."""
    half = var("c_half")
    if form == 0:
        return op.Mul(op.Mul(x, half), one_plus, _outputs=["out"])
    if form == 1:
        return op.Mul(x, op.Mul(one_plus, half), _outputs=["out"])
    return op.Mul(op.Mul(x, one_plus), half, _outputs=["out"])


def _erf_gelu(form: int, scale_op: str) -> StepPattern:
    def graph(op, x):
        scaled = getattr(op, scale_op)(x, var("c_sqrt"))
        return _half_x_times(op, x, op.Add(op.Erf(scaled), var("c_one")), form)

    def extract(b, rank, channels, axis):
        want = math.sqrt(2.0) if scale_op == "Div" else 1.0 / math.sqrt(2.0)
        ok = (close(const(b.get("c_sqrt")), want) and close(const(b.get("c_half")), 0.5)
              and close(const(b.get("c_one")), 1.0))
        return ("gelu", (), None) if ok else None

    return StepPattern(f"gelu_erf_{scale_op.lower()}_{form}", graph, extract, commute=True)


def _tanh_gelu(form: int, cube: str) -> StepPattern:
    def graph(op, x):
        x3 = op.Pow(x, var("c_three")) if cube == "pow" else op.Mul(op.Mul(x, x), x)
        inner = op.Mul(op.Add(x, op.Mul(x3, var("c_coef"))), var("c_k"))
        return _half_x_times(op, x, op.Add(op.Tanh(inner), var("c_one")), form)

    def extract(b, rank, channels, axis):
        ok = (close(const(b.get("c_k")), math.sqrt(2.0 / math.pi), 1e-5)
              and close(const(b.get("c_coef")), 0.044715, 1e-5) and close(const(b.get("c_half")), 0.5)
              and close(const(b.get("c_one")), 1.0)
              and (cube != "pow" or close(const(b.get("c_three")), 3.0)))
        return ("gelu_tanh", (), None) if ok else None

    return StepPattern(f"gelu_tanh_{cube}_{form}", graph, extract, commute=True)


# ---- generated from the op spec ----------------------------------------------------------------------------------

def onnx_op_pattern(kind: catalog.StepKind) -> StepPattern:
    """The spec's onnx_op of a step: that op on x, its attributes (absent: the op's own defaults) as parameters."""
    op = kind.spec["onnx_op"]
    defaults = op.get("defaults", {})
    names = kind.param_names
    read = (lambda n: tuple(float(attr(n, p, defaults[p])) for p in names)) if names else None
    return _unary(kind.name, op["op"], kind.name, read)


def formula_pattern(kind: catalog.StepKind) -> StepPattern:
    """The step's formula expanded in ONNX ops exactly as its generated function body (formula_onnx), every
    operand order of Add / Mul. Literals must match (relative 1e-6, or the spacing of a 16-bit constant); each
    parameter occurrence binds a scalar constant, all occurrences of one parameter equal, valid for the step."""
    leaves: list[tuple[str, object]] = []  # (pattern variable, ("num", value) | ("param", name)) in build order

    def graph(op, x):
        leaves.clear()

        def num(value: float):
            leaves.append((f"k{len(leaves)}", ("num", value)))
            return var(leaves[-1][0])

        def variable(name: str):
            if name == "x":
                return x
            leaves.append((f"k{len(leaves)}", ("param", name)))
            return var(leaves[-1][0])

        return formula_onnx.expand(kind.tree, num, variable,
                                   lambda op_type, ins, **kw: getattr(op, op_type)(*ins, **kw), _outputs=["out"])

    def extract(b, rank, channels, axis):
        params: dict[str, float] = {}
        for name, (what, value) in leaves:
            arr = const(b.get(name))
            if what == "num":
                if not close(arr, value):
                    return None
                continue
            if arr is None or arr.size != 1 or math.isnan(_scalar(arr)) or params.get(value, _scalar(arr)) != \
                    _scalar(arr):
                return None
            params[value] = _scalar(arr)
        p = tuple(params.get(n, d) for n, d in zip(kind.param_names, kind.defaults))
        try:
            catalog._check_params(kind, p)
        except catalog.CatalogError:
            return None
        return (kind.name, p, None)

    return StepPattern(f"{kind.name}_formula", graph, extract, commute=True)


_UNARY = [k for k in catalog.STEP_KINDS.values() if not k.binary]
FORMULA_PATTERNS = [formula_pattern(k) for k in _UNARY if k.spec.get("fuser", "formula") == "formula"]
ONNX_OP_PATTERNS = [onnx_op_pattern(k) for k in _UNARY if k.spec.get("onnx_op")]

# ---- the list the fuser tries -------------------------------------------------------------------------------------
# Multi-op forms first: at one root the first matching rule wins, and a decomposed GELU ends in a Mul by 0.5 that
# the plain "mul" rule would otherwise take on its own. Hand-written patterns are the steps whose spec says
# fuser = "hand" (the forms exporters write differ from the formula's expansion) plus Reciprocal / Add(x, x).
STEP_PATTERNS: list[StepPattern] = [
    *[_erf_gelu(form, scale_op) for form in range(3) for scale_op in ("Div", "Mul")],
    *[_tanh_gelu(form, cube) for form in range(3) for cube in ("pow", "mul")],
    StepPattern("silu", _silu_graph, lambda b, r, c, a: ("silu", (), None), commute=True),
    StepPattern("mish_decomposed", _mish_graph, lambda b, r, c, a: ("mish", (), None), commute=True),
    StepPattern("softplus_threshold", _softplus_threshold_graph, _softplus_extract),
    StepPattern("softplus_beta", _softplus_beta_graph, _softplus_extract, commute=True),
    *FORMULA_PATTERNS,
    StepPattern("add_self", lambda op, x: op.Add(x, x, _outputs=["out"]), lambda b, r, c, a: ("mul", (), 2.0)),
    _binary("add", "Add", "add", False), _binary("add_l", "Add", "add", True),
    _binary("sub", "Sub", "sub", False), _binary("rsub", "Sub", "rsub", True),
    _binary("mul", "Mul", "mul", False), _binary("mul_l", "Mul", "mul", True),
    _binary("div", "Div", "div", False), _binary("rdiv", "Div", "rdiv", True),
    *ONNX_OP_PATTERNS,
    StepPattern("reciprocal", lambda op, x: op.Reciprocal(x, _outputs=["out"]),
                lambda b, r, c, a: ("rdiv", (), 1.0)),
    _unary("softplus", "Softplus", "softplus", lambda n: (1.0, 20.0)),
    StepPattern("gelu_op", lambda op, x: op.Gelu(x, _allow_other_attributes=True, _outputs=["out"]),
                _gelu_op_extract),
    StepPattern("clip", _clip_graph, _clip_extract),
]

REDUCE_OPS = {"ReduceMin": "min", "ReduceMax": "max", "ReduceSum": "sum", "ReduceMean": "mean",
              "ReduceLogSumExp": "logsumexp"}


