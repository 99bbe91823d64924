"""The fusion report: every GroupNorm the fuser found in a model, what it became, or why it was left.

A *site* is a GroupNorm in the input: an ONNX ``GroupNormalization`` node, an ``InstanceNormalization`` fed by a
``Reshape`` (torch's GroupNorm decomposition), or a ``fusedops`` node of an already fused model. Sites are marked in
the nodes' metadata before fusing; every fused node carries the sites it stands for, so after fusing each site is
either in a fused node (op, chains, reduction) or still in the graph, where ``diagnose`` names the reason.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx_ir as ir

from fusedops import catalog

from .rule_util import DOMAIN, FUSED_OPS, ORIGINS_KEY
from .rules_core import SITE_KEY, onnx_gn_plan, torch_gn_plan

TORCH_GN = "InstanceNormalization"


@dataclass
class GroupNormEntry:
    """One GroupNorm of the input model."""

    site: str  # e.g. "GroupNormalization 'gn1'" or "InstanceNormalization 'node_7' (torch GroupNorm)"
    status: str  # "fused" | "unfused"
    op: str | None = None  # GroupNormAct | GemmGroupNormAct | ConvTransposeGroupNormAct
    node: str | None = None  # the fused node's name
    dtype: str | None = None  # X's element type
    num_groups: int | None = None
    channels: int | None = None
    pre: str = ""
    post: str = ""
    reduce: str = ""
    trans_b: int | None = None
    before: str | None = None  # op producing the fused node's X (where the pre chain stopped)
    after: list[str] = field(default_factory=list)  # ops consuming its output (where the post chain stopped)
    reason: str | None = None  # why an unfused one was left


@dataclass
class FusionReport:
    group_norms: list[GroupNormEntry] = field(default_factory=list)
    fused_nodes: int = 0
    notes: list[str] = field(default_factory=list)  # opt-in folds that did not happen, and why

    @property
    def unfused(self) -> list[GroupNormEntry]:
        return [e for e in self.group_norms if e.status != "fused"]

    def to_dict(self) -> dict:
        ops: dict[str, int] = {}
        for e in self.group_norms:
            if e.status == "fused":
                ops[e.op] = ops.get(e.op, 0) + 1
        return {"group_norms_found": len(self.group_norms), "fused": len(self.group_norms) - len(self.unfused),
                "unfused": len(self.unfused), "fused_nodes": self.fused_nodes, "by_op": ops,
                "group_norms": [asdict(e) for e in self.group_norms],
                **({"notes": list(self.notes)} if self.notes else {})}  # absent when empty: reports stay as before

    def summary(self) -> str:
        n = len(self.group_norms)
        if n == 0:
            return "no GroupNorm found"
        by_op = self.to_dict()["by_op"]
        ops = ", ".join(f"{op} x{k}" for op, k in sorted(by_op.items()))
        return f"fused {n - len(self.unfused)} of {n} GroupNorms into {self.fused_nodes} node(s)" + (
            f" ({ops})" if ops else "") + (f"; {len(self.notes)} note(s): {' | '.join(self.notes)}" if self.notes
                                          else "")

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _name(node: ir.Node, index: int) -> str:
    return repr(node.name) if node.name else f"#{index}"


def mark_sites(model: ir.Model) -> dict[str, ir.Node]:
    """Give every GroupNorm site of the graph an id (node metadata); returns id → node."""
    sites: dict[str, ir.Node] = {}
    for i, node in enumerate(model.graph):
        if node.domain == DOMAIN and node.op_type in FUSED_OPS:
            sid = f"{node.op_type} {_name(node, i)} (already fused)"
            node.meta[ORIGINS_KEY] = tuple(node.meta.get(ORIGINS_KEY, ())) or (sid,)
        elif node.domain == "" and node.op_type == "GroupNormalization":
            sid = f"GroupNormalization {_name(node, i)}"
        elif (node.domain == "" and node.op_type == TORCH_GN and node.inputs and node.inputs[0] is not None
              and node.inputs[0].producer() is not None and node.inputs[0].producer().op_type == "Reshape"):
            sid = f"InstanceNormalization {_name(node, i)} (torch GroupNorm)"
        else:
            continue
        while sid in sites:
            sid += "'"
        node.meta[SITE_KEY] = sid
        sites[sid] = node
    return sites


def _consumer(v: ir.Value | None, op_type: str) -> ir.Node | None:
    """The first consumer of ``v`` of type ``op_type`` (whatever other consumers it has: those are reported)."""
    if v is None:
        return None
    return next((u.node for u in v.uses() if u.node.op_type == op_type and u.node.domain == ""), None)


def _blocking(values) -> str | None:
    for v in values:
        if v is not None and (v.is_graph_output() or len(v.uses()) != 1):
            what = "is a graph output" if v.is_graph_output() else f"has {len(v.uses())} consumers"
            return f"an intermediate value of the GroupNorm ({v.name!r}) {what}"
    return None


def _const_operand(node: ir.Node, v: ir.Value) -> ir.Value | None:
    others = [i for i in node.inputs if i is not v]
    return others[0] if len(others) == 1 and others[0] is not None and others[0].const_value is not None else None


def _diagnose_torch(node: ir.Node) -> str:
    r1 = node.inputs[0]
    reshape = r1.producer()
    if len(node.inputs) < 3 or len(reshape.inputs) < 2:
        return "InstanceNormalization / Reshape with missing inputs"
    x, s1 = reshape.inputs[0], reshape.inputs[1]
    out = node.outputs[0]
    r2 = s2 = gamma = beta = None
    nxt = _consumer(out, "Reshape")
    if nxt is not None and nxt.inputs[0] is out:
        r2, s2 = nxt.outputs[0], nxt.inputs[1]
    y = r2 if r2 is not None else out
    mul = _consumer(y, "Mul")
    mul_out = None
    if mul is not None and _const_operand(mul, y) is not None:
        add = _consumer(mul.outputs[0], "Add")
        if add is not None and _const_operand(add, mul.outputs[0]) is not None:
            gamma, beta, mul_out = _const_operand(mul, y), _const_operand(add, mul.outputs[0]), mul.outputs[0]
    plan = torch_gn_plan(x, s1, node.inputs[1], node.inputs[2], r1, out, s2, r2, gamma, beta)
    if isinstance(plan, str):
        return plan
    return _blocking([r1, out, r2, mul_out]) or "recognised, but the rewriter did not replace it"


def diagnose(node: ir.Node, opset: int | None) -> str:
    """Why the GroupNorm site ``node`` (still in the graph after fusing) was left unfused."""
    if node.graph is None:
        return "removed from the graph (its output was unused)"
    if node.op_type == "GroupNormalization":
        if len(node.inputs) < 3:
            return "GroupNormalization with missing inputs"
        plan = onnx_gn_plan(opset, node.inputs[0], node.inputs[1], node.inputs[2], node.outputs[0])
        return plan if isinstance(plan, str) else "recognised, but the rewriter did not replace it"
    return _diagnose_torch(node)


def _fused_entry(site: str, node: ir.Node) -> GroupNormEntry:
    fa = catalog.parse_attrs(node.op_type, {k: a.value for k, a in node.attributes.items()})
    x = node.inputs[0]
    gamma = node.inputs[catalog.OPS[node.op_type].inputs.index("gamma")]
    producer = x.producer() if x is not None else None
    return GroupNormEntry(
        site=site, status="fused", op=node.op_type, node=node.name, dtype=x.dtype.name if x is not None and
        x.dtype is not None else None, num_groups=fa.num_groups,
        channels=gamma.shape[0] if gamma is not None and gamma.shape is not None else None,
        pre=catalog.chain_text(fa.pre), post=catalog.chain_text(fa.post), reduce=fa.reduce,
        trans_b=fa.trans_b if node.op_type == catalog.GEMM_GROUP_NORM_ACT.name else None,
        before=None if producer is None else producer.op_type,
        after=[u.node.op_type for u in node.outputs[0].uses()])


def build_report(model: ir.Model, sites: dict[str, ir.Node], opset: int | None) -> FusionReport:
    report = FusionReport()
    placed: dict[str, GroupNormEntry] = {}
    for node in model.graph:
        if node.domain != DOMAIN or node.op_type not in FUSED_OPS:
            continue
        report.fused_nodes += 1
        for site in node.meta.get(ORIGINS_KEY, ()):
            placed[site] = _fused_entry(site, node)
    for site, node in sites.items():
        if site in placed:
            report.group_norms.append(placed.pop(site))
            continue
        x = node.inputs[0] if node.inputs else None
        if node.op_type == TORCH_GN and x is not None and x.producer() is not None:
            x = x.producer().inputs[0]
        report.group_norms.append(GroupNormEntry(site=site, status="unfused", reason=diagnose(node, opset),
                                                 dtype=x.dtype.name if x is not None and x.dtype else None))
    report.group_norms.extend(placed.values())  # sites of already fused input nodes
    return report

