"""The rewrite driver: owns the rules (built once: the commuted variants are costly), emits fused nodes, and runs
phase 1 (``rules_core``) and phase 2 (``rules_grow``, to a fixed point) on an onnx-ir model in place."""

from __future__ import annotations

import threading

import numpy as np
import onnx_ir as ir
import onnxscript.optimizer
from onnxscript.rewriter import _pattern_ir
from onnxscript.rewriter import pattern as orp

from fusedops import catalog

from . import rules_convt, rules_core, rules_grow
from .rule_util import CONVT_GN, DOMAIN, GEMM_GN, ORIGINS_KEY, Flatten, Fused, all_values, output_shape

_MAX_GROW_PASSES = 200  # each pass absorbs at least one op; chains are capped at catalog.MAX_STEPS anyway


class Fuser:
    def __init__(self):
        self.opset: int | None = None
        self._used_names: set[str] = set()
        self._n = 0
        self._core: list[orp.RewriteRuleSet] | None = None
        self._grow: orp.RewriteRuleSet | None = None
        self._convt: orp.RewriteRuleSet | None = None

    def run(self, model: ir.Model, convtranspose: bool = False) -> None:
        """Phases 1 and 2 on ``model``, in place; ``convtranspose``: also fold ConvTransposes into
        ConvTransposeGroupNormAct (rules_convt; off by default: see rules_convt's docstring)."""
        self.opset = model.opset_imports.get("", None)
        self._used_names = {v.name for v in all_values(model.graph)}
        self._n = 0
        if self._core is None:
            self._core = [_dispatch_by_root(rs) for rs in rules_core.core_rule_sets(self)]
            self._grow = _dispatch_by_root(rules_grow.grow_rules(self))
        if convtranspose and self._convt is None:
            self._convt = _dispatch_by_root(rules_convt.convtranspose_rules(self))
        # Dead nodes (e.g. the Shape(x) of torch's GroupNorm) would count as other consumers and block fusion.
        for rule_set in self._core:
            rule_set.apply_to_model(model)
            onnxscript.optimizer.remove_unused_nodes(model)
        for _ in range(_MAX_GROW_PASSES):
            changed = self._grow.apply_to_model(model)
            if convtranspose:  # after the grow rules: a GroupNormAct's pre chain is absorbed before its ConvTranspose
                changed += self._convt.apply_to_model(model)
            onnxscript.optimizer.remove_unused_nodes(model)
            if changed == 0:
                break

    def _fresh(self, hint: str) -> str:
        while True:
            name = f"fusedops_{hint}_{self._n}"
            self._n += 1
            if name not in self._used_names:
                self._used_names.add(name)
                return name

    def _initializer(self, op, array: np.ndarray, hint: str):
        t = ir.tensor(np.ascontiguousarray(array), name=self._fresh(hint))
        return op.initializer(t, name=t.name)

    def emit(self, op, f: Fused, like: ir.Value):
        """Replacement: one fused node from ``f``; its output takes the type and shape of ``like``. Parameters are
        float32 (new initializers, or a Cast of a 16-bit tensor); W keeps X's type."""
        names = list(catalog.OPS[f.op_type].inputs) + [f"extra{k}" for k in range(len(f.extras))]
        first_param = 2 if f.op_type in (GEMM_GN, CONVT_GN) else 1
        vals = []
        for i, (name, v) in enumerate(zip(names, f.inputs)):
            if v is None:  # an optional input left out (ConvTransposeGroupNormAct's B)
                pass
            elif isinstance(v, np.ndarray):
                v = self._initializer(op, v.astype(np.float32), name.lower())
            elif isinstance(v, Flatten):
                src, cols = v.value, v.channels
                v = op.Reshape(src, self._initializer(op, np.array([-1, cols], np.int64), "flat_shape"))
                lead = list(src.shape)[:-1]
                rows = int(np.prod(lead)) if all(isinstance(d, int) for d in lead) else None
                v.dtype, v.shape = src.dtype, ir.Shape([rows, cols])
            elif i >= first_param and v.dtype != ir.DataType.FLOAT:
                v = op.Cast(v, to=ir.DataType.FLOAT)
            vals.append(v)
        out = op.op(f.op_type, *vals, _domain=DOMAIN, _version=catalog.VERSION, **f.attrs.onnx_attrs(f.op_type))
        out.type = like.type if like.type is not None else ir.TensorType(f.x_dtype or ir.DataType.FLOAT)
        out.shape = like.shape if like.shape is not None else output_shape(f)
        out.producer().meta[ORIGINS_KEY] = tuple(f.origins)
        return out


def _constant_op(node) -> tuple[str | None, str]:
    """(op type, domain) of a pattern node whose op and domain are constants, else (None, "")."""
    op, domain = node.op, node.domain
    constant = _pattern_ir.StringConstantPattern
    if not (isinstance(op, constant) and isinstance(domain, constant)):
        return None, ""
    dom = str(domain)
    return str(op), "" if dom == "ai.onnx" else dom


def _dispatch_by_root(rule_set: orp.RewriteRuleSet) -> orp.RewriteRuleSet:
    """Skip a rule at once on a node whose op is not its pattern's root op.

    The rewriter tries every rule at every node, and a failed match costs ~35 us of Python; with the commuted
    variants of the decomposed forms the grow set has ~3200 rules, so a 380-node diffusers UNet took 70 s to fuse.
    The root op of each pattern is a constant, so a string compare rejects almost all pairs first. (Reads the
    pattern's root through onnxscript's pattern IR; a rule whose root is not a constant op is left as is.)"""
    for rule in rule_set.rules:
        try:
            root = rule._target_pattern.output_node
            op_type, dom = _constant_op(root)
            # a pre-step rule is rooted at the fused node: also require the op that produces its input 0
            first = root.inputs[0] if root.inputs else None
            feeder = _constant_op(first.producer()) if isinstance(first, _pattern_ir.NodeOutputPattern) else None
        except AttributeError:
            continue
        if op_type is None:
            continue

        def try_rewrite(model, graph, node, *args, _inner=rule.try_rewrite, _op=op_type, _dom=dom, _feeder=feeder,
                        **kwargs):
            if node.op_type != _op or (node.domain or "") != _dom:
                return None
            if _feeder is not None and _feeder[0] is not None:
                x = node.inputs[0] if node.inputs else None
                p = x.producer() if x is not None else None
                if p is None or p.op_type != _feeder[0] or (p.domain or "") != _feeder[1]:
                    return None
            return _inner(model, graph, node, *args, **kwargs)

        rule.try_rewrite = try_rewrite
    return rule_set


FUSER = Fuser()
FUSER_LOCK = threading.Lock()  # the fuser holds the state of the model being fused
