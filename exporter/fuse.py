"""Fuse GroupNorm and the elementwise chains / GEMM / channel reduction around it into ``fusedops`` nodes.

Built on the onnxscript rewriter; the fuser runs in four steps on an onnx-ir model:

0. *canonicalise* (``canonical.py``): onnxscript's constant folding and onnx-ir's identity elimination, so weights
   reached through Identity / Cast / Reshape / Unsqueeze of constants match like plain initializers;
1. *core* (``rules_core.py``): each GroupNorm becomes a ``GroupNormAct`` node with empty chains;
2. *grow* (``rules_grow.py``), to a fixed point: chain steps, channel reductions, producing GEMMs (rank 2 and token
   rows), the float32 casts of 16-bit graphs; with ``convtranspose=True`` also producing ConvTransposes
   (``rules_convt.py``: ConvTransposeGroupNormAct, opt-in: its kernels beat cuDNN + GroupNormAct only on sm_90);
3. *finish*: validate each node with ``catalog.parse_attrs``, attach one standard-op FunctionProto per distinct node
   configuration (IR-10 overloads, see ``functions.py``), add the ``fusedops`` opset; the fusion report
   (``report.py``) names what each GroupNorm became or why it was left.

``fuse_model`` works on an in-memory ModelProto; ``fuse_ir`` on an onnx-ir model (what ``exporter_api.fuse_file``
uses, so external data stays on disk).
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir

from fusedops import catalog
from fusedops.errors import FusedopsError
from fusedops.version import __version__

from . import canonical, functions, rules_convt, validate
from .fuser import FUSER, FUSER_LOCK
from .report import FusionReport, build_report, mark_sites
from .rule_util import DOMAIN, FUSED_OPS, attr, rank

VERSION_KEY = "fusedops_version"  # metadata_props key of a fused model

OVERLOAD_NOTE_KEY = "fusedops.function_overloads"


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
        g = attr(node, "num_groups")
        x = node.inputs[0]
        c = x.shape[1] if x is not None and x.shape is not None and x.shape.rank() >= 2 else None
        where = f"GroupNormalization node {node.name or '(unnamed)'!r}"
        if g is None or int(g) <= 0:
            raise FusedopsError(f"{where}: num_groups must be a positive integer, got {g}")
        if isinstance(c, int) and c % int(g) != 0:
            raise FusedopsError(f"{where}: channels C={c} is not divisible by num_groups={g}")


def check_opset(opset: int | None) -> int:
    if opset is None or not functions.MIN_OPSET <= opset <= functions.MAX_OPSET:
        raise FusedopsError(f"the model's default-domain opset is {opset}; the fuser supports opsets "
                            f"{functions.MIN_OPSET}-{functions.MAX_OPSET}")
    return opset


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference (shapes only help; a model it cannot handle still fuses what has known shapes). The
    proto must not hold more than 2 GB (external data not loaded)."""
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:
        return model


def fuse_ir(model: ir.Model, convtranspose: bool = False) -> tuple[dict, FusionReport]:
    """Fuse ``model`` in place (canonicalise, phases 1-2, finish). Returns the functions attached
    ({(op, overload): FunctionProto}) and the fusion report. ``convtranspose``: fold a ConvTranspose before a
    GroupNorm into ConvTransposeGroupNormAct (off by default: see ``rules_convt``)."""
    opset = check_opset(model.opset_imports.get("", None))
    _validate_input(model)
    with FUSER_LOCK:
        canonical.canonicalize(model)
        sites = mark_sites(model)
        FUSER.run(model, convtranspose=convtranspose)
    report = build_report(model, sites, opset)
    if convtranspose:
        report.notes += rules_convt.unfolded_notes(model)
    fns: dict[tuple[str, str], onnx.FunctionProto] = {}
    for node in model.graph:
        if node.domain != DOMAIN or node.op_type not in FUSED_OPS:
            continue
        attrs = {k: a.value for k, a in node.attributes.items()}
        try:
            fa = catalog.parse_attrs(node.op_type, attrs)
        except catalog.CatalogError as e:
            raise FusedopsError(str(e)) from None
        n_extras = len(node.inputs) - len(catalog.OPS[node.op_type].inputs)
        try:  # rank is validated when known; the bodies are rank-generic
            fn = functions.build_function(node.op_type, fa, rank(node.inputs[0]), opset, n_extras)
        except catalog.CatalogError as e:
            raise FusedopsError(f"fusedops node {node.name or '(unnamed)'!r}: {e}") from None
        node.overload = fn.overload
        fns.setdefault((node.op_type, fn.overload), fn)
    if fns:
        model.opset_imports[DOMAIN] = catalog.VERSION
        model.ir_version = 10  # function overloads need IR 10; later IRs are not accepted by every runtime yet
        # functions of an earlier fusion whose nodes changed are dropped; the others are (re)built from the nodes
        for key in [k for k in model.functions if k[0] == DOMAIN]:
            del model.functions[key]
        for _, fn in sorted(fns.items()):
            f = ir.serde.deserialize_function(fn)
            model.functions[f.identifier()] = f
        note = _overload_note(fns)
        model.metadata_props.pop(OVERLOAD_NOTE_KEY, None)
        model.metadata_props[VERSION_KEY] = __version__  # which fusedops wrote the nodes (provenance)
        if note:
            model.metadata_props[OVERLOAD_NOTE_KEY] = note
            logging.getLogger(__name__).info(note)
    return fns, report


def fuse_model_with_report(model: onnx.ModelProto, convtranspose: bool = False
                           ) -> tuple[onnx.ModelProto, FusionReport]:
    """``fuse_model`` and its fusion report."""
    if not isinstance(model, onnx.ModelProto):
        raise FusedopsError(f"fuse_model expects an onnx.ModelProto, got {type(model).__name__}")
    opset = check_opset(next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None))
    model = validate.checked_input(model, opset)  # every user error named before anything is rewritten
    inferred = infer_shapes(model)
    irm = ir.from_proto(inferred)
    fns, report = fuse_ir(irm, convtranspose=convtranspose)
    if not fns:
        out = onnx.ModelProto()
        out.CopyFrom(inferred)
        return out, report
    out = ir.to_proto(irm)
    _drop_stale_value_info(out)
    check_fused(out, model)
    return out, report


def check_fused(fused, original) -> None:
    """The ONNX checker with full shape inference on the fused model (a ModelProto or a path). A failure is a fuser
    bug, unless the original fails the same check (e.g. torch exports a bfloat16 Conv, which ONNX's schema does
    not allow): then only the structure is checked, since the fuser cannot make an invalid model valid."""
    try:
        onnx.checker.check_model(fused, full_check=True)
        return
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        error = e
    try:
        onnx.checker.check_model(original, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        onnx.checker.check_model(fused)
        return
    raise RuntimeError(f"fused model fails the ONNX checker: {error}") from error


def fuse_model(model: onnx.ModelProto, convtranspose: bool = False) -> onnx.ModelProto:
    """Return a copy of ``model`` with GroupNorm (+ GEMM, elementwise chains, channel reduction) fused into
    ``fusedops`` nodes, each with a standard-op function body. Unfusible parts stay standard. Raises FusedopsError
    for an invalid model (e.g. C not divisible by num_groups). ``convtranspose=True`` also folds a ConvTranspose
    before a GroupNorm (ConvTransposeGroupNormAct: the ORT library and the TensorRT plugin run it)."""
    return fuse_model_with_report(model, convtranspose=convtranspose)[0]


def _overload_note(fns: dict) -> str | None:
    """Several function bodies for one op type need a runtime that honours IR-10 overloads when it runs the bodies
    (onnxruntime >= 1.27; 1.21-1.26 silently run one body for all)."""
    counts: dict[str, int] = {}
    for op_type, _ in fns:
        counts[op_type] = counts.get(op_type, 0) + 1
    multi = {op: n for op, n in counts.items() if n > 1}
    if not multi:
        return None
    return (", ".join(f"{op}: {n} function overloads" for op, n in sorted(multi.items()))
            + "; running the function bodies needs onnxruntime >= 1.27 (or the fusedops runtime libraries)")


def _drop_stale_value_info(model: onnx.ModelProto) -> None:
    """value_info entries for values that no longer exist confuse some tools."""
    live = {o for n in model.graph.node for o in n.output}
    keep = [vi for vi in model.graph.value_info if vi.name in live]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)


def fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.domain == DOMAIN and n.op_type in FUSED_OPS]


def fusion_summary(model: onnx.ModelProto) -> list[tuple[str, dict[str, object]]]:
    """(op_type, attributes) of every fused node, in graph order."""
    out = []
    for n in fused_nodes(model):
        out.append((n.op_type, {a.name: onnx.helper.get_attribute_value(a) if a.type != onnx.AttributeProto.STRING
                                else a.s.decode() for a in n.attribute}))
    return out
