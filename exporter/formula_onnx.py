"""A step formula of the op spec in standard ONNX ops: one expansion that function bodies emit as nodes and the fuser
matches as an onnxscript pattern (``steps.formula_pattern``), so the two agree on the form by construction.

Every formula function has an ONNX op of the same meaning in opset 17+; ``log1p`` (none in ONNX) becomes
``Log(Add(1, t))``, which loses relative accuracy for tiny t (steps that need it have a hand-written body, e.g.
softplus / mish). ``clamp`` is ``Clip`` with both bounds given.
"""

from __future__ import annotations

from typing import Callable

from fusedops.spec import formula

ONNX_OPS = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "neg": "Neg", "lt": "Less", "gt": "Greater",
            "le": "LessOrEqual", "ge": "GreaterOrEqual", "where": "Where", "clamp": "Clip", "exp": "Exp",
            "log": "Log", "tanh": "Tanh", "erf": "Erf", "abs": "Abs", "sqrt": "Sqrt"}
assert set(ONNX_OPS) | {"log1p"} >= set(formula.FUNCTIONS) | {"add", "sub", "mul", "div", "neg", "lt", "gt", "le",
                                                               "ge"}, "every formula op needs an ONNX form"


def expand(tree: tuple, num: Callable, var: Callable, emit: Callable, **root_kwargs):
    """The formula ``tree`` in ONNX ops: ``num(value)`` makes a scalar constant, ``var(name)`` gives a variable's
    value, ``emit(op_type, inputs, **kwargs)`` makes one node and returns its output; ``root_kwargs`` go to the
    node that computes the result (e.g. the pattern's output name). Returns the result."""

    def node(name: str, args: list, kwargs: dict):
        if name == "log1p":
            return emit("Log", [emit("Add", [num(1.0), args[0]])], **kwargs)
        return emit(ONNX_OPS[name], args, **kwargs)

    kind = tree[0]
    if kind in ("num", "var"):  # a formula of x alone (x itself, say) has no node to name: wrap it
        return emit("Identity", [formula.fold(tree, num, var, lambda n, a: node(n, a, {}))], **root_kwargs)
    args = [formula.fold(t, num, var, lambda n, a: node(n, a, {})) for t in tree[1:]]
    return node(kind, args, root_kwargs)
