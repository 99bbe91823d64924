"""Validate a model before the fuser touches it: every problem of the user's model becomes one FusedopsError naming
the node, the attribute or the value, before anything is allocated or rewritten.

``checked_input(model, opset)`` is the one entry (``fuse_model`` calls it first). It checks
- the graph: every value produced once, graph outputs listed once, declared dimensions non-negative, initializers
  whose data matches their declared size;
- GroupNormalization nodes: the opset has the op (18+), attributes by name and type (``num_groups`` INT required,
  ``epsilon`` FLOAT, ``stash_type`` INT from opset 21; any other name is an error), three inputs, scale / bias of
  the length the opset requires, C divisible by num_groups and at most MAX_CHANNELS;
- fusedops nodes: the op, attributes by name and ONNX type (STRING values valid UTF-8), the catalog's value checks,
  input / output counts, X's rank and the per-channel inputs' lengths where known;
and returns the model, or a copy whose fusedops nodes carry every attribute explicitly (defaults written out: the
function bodies and the ORT library read them from the node).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto

from fusedops import catalog
from fusedops.catalog import quote
from fusedops.errors import ModelError
from fusedops.input_files import all_tensors

# The fuser materialises per-channel vectors (C floats each) for constant operands and per-group scale / bias; a
# model that declares more channels than this is rejected before anything is allocated (a 240-byte model declaring
# C = 2**40 asked numpy for 4 TiB).
MAX_CHANNELS = 1 << 24

_ATTR_TYPE_NAMES = {v: k for k, v in AttributeProto.AttributeType.items()}
_ONNX_TYPE = {"INT": AttributeProto.INT, "INTS": AttributeProto.INTS, "FLOAT": AttributeProto.FLOAT,
              "STRING": AttributeProto.STRING}
_GN_ATTRS = {"num_groups": AttributeProto.INT, "epsilon": AttributeProto.FLOAT, "stash_type": AttributeProto.INT}


def _node_name(node: onnx.NodeProto, index: int) -> str:
    return quote(node.name) if node.name else f"#{index} (unnamed)"


def _attr_value(a: AttributeProto):
    if a.type == AttributeProto.INT:
        return a.i
    if a.type == AttributeProto.FLOAT:
        return a.f
    if a.type == AttributeProto.STRING:
        return a.s
    if a.type == AttributeProto.INTS:
        return list(a.ints)
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Graph structure and declared sizes
# ---------------------------------------------------------------------------------------------------------------------

def _check_graph(graph: onnx.GraphProto) -> None:
    produced: dict[str, str] = {}
    for vi in graph.input:
        produced.setdefault(vi.name, f"graph input {quote(vi.name)}")
    for t in graph.initializer:
        produced.setdefault(t.name, f"initializer {quote(t.name)}")
    for i, node in enumerate(graph.node):
        for out in node.output:
            if not out:
                continue  # an omitted optional output
            by = f"node {_node_name(node, i)}"
            if out in produced:
                raise ModelError(f"value {quote(out)} is produced twice (by {produced[out]} and by {by}); "
                                    f"every value must have one producer")
            produced[out] = by
    seen = set()
    for vi in graph.output:
        if vi.name in seen:
            raise ModelError(f"graph output {quote(vi.name)} is listed twice")
        seen.add(vi.name)
    for kind, infos in (("graph input", graph.input), ("graph output", graph.output)):
        for vi in infos:
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
                raise ModelError(f"{kind} {quote(vi.name)} has a tensor type without a shape; ONNX requires one "
                                 f"(dimensions may be left symbolic, e.g. 'N')")
    for kind, infos in (("graph input", graph.input), ("graph output", graph.output),
                        ("value_info", graph.value_info)):
        for vi in infos:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                for d in vi.type.tensor_type.shape.dim:
                    if d.HasField("dim_value") and d.dim_value < 0:
                        raise ModelError(f"{kind} {quote(vi.name)} declares a negative dimension {d.dim_value}")
    for t in graph.initializer:
        _check_initializer(t)


_FIELD_OF = {TensorProto.FLOAT: "float_data", TensorProto.DOUBLE: "double_data", TensorProto.INT64: "int64_data",
             TensorProto.UINT64: "uint64_data", TensorProto.STRING: "string_data"}


def _check_initializer(t: TensorProto) -> None:
    if any(d < 0 for d in t.dims):
        raise ModelError(f"initializer {quote(t.name)} declares a negative dimension in {list(t.dims)}")
    if t.data_location == TensorProto.EXTERNAL:
        return  # checked (and loaded) by the model loader
    numel = int(np.prod([int(d) for d in t.dims], dtype=object)) if t.dims else 1
    if t.HasField("raw_data") or t.raw_data:
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        except (KeyError, TypeError, ValueError):
            return  # an element type numpy does not know: left to the checker
        if t.data_type in (TensorProto.INT4, TensorProto.UINT4) or getattr(TensorProto, "FLOAT4E2M1", -1) == \
                t.data_type:
            return
        if len(t.raw_data) != numel * itemsize:
            raise ModelError(f"initializer {quote(t.name)} declares shape {list(t.dims)} ({numel} elements) but "
                                f"holds {len(t.raw_data)} bytes of data")
        return
    field = _FIELD_OF.get(t.data_type, "int32_data")
    have = len(getattr(t, field))
    if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        have //= 2
    if have != numel and not (have == 0 and numel == 0):
        raise ModelError(f"initializer {quote(t.name)} declares shape {list(t.dims)} ({numel} elements) but "
                            f"holds {have}")


# ---------------------------------------------------------------------------------------------------------------------
# Shapes known without running anything
# ---------------------------------------------------------------------------------------------------------------------

class _Shapes:
    """Static shapes (tuples of int | None) of the values of a graph: declared, initializers, inferred."""

    def __init__(self, model: onnx.ModelProto):
        self.shapes: dict[str, tuple | None] = {}
        self.consts: dict[str, TensorProto] = {t.name: t for t in model.graph.initializer}
        try:
            inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001 - shapes only sharpen the checks; an un-inferable model is checked as is
            inferred = model
        g = inferred.graph
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.HasField("shape"):
                self.shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        for t in model.graph.initializer:
            self.shapes[t.name] = tuple(int(d) for d in t.dims)

    def of(self, name: str) -> tuple | None:
        return self.shapes.get(name)

    def numel(self, name: str) -> int | None:
        s = self.of(name)
        if s is None or any(d is None for d in s):
            return None
        return int(np.prod(s, dtype=object)) if s else 1


def _shape_text(shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _check_channels(where: str, c) -> None:
    if isinstance(c, int) and c > MAX_CHANNELS:
        raise ModelError(f"{where}: C={c} channels is more than the fuser supports ({MAX_CHANNELS})")


# ---------------------------------------------------------------------------------------------------------------------
# GroupNormalization
# ---------------------------------------------------------------------------------------------------------------------

def _check_group_normalization(node: onnx.NodeProto, index: int, opset: int, shapes: _Shapes) -> None:
    where = f"GroupNormalization node {_node_name(node, index)}"
    if opset < 18:
        raise ModelError(f"{where}: GroupNormalization needs default-domain opset 18 or newer; the model imports "
                            f"opset {opset}")
    allowed = dict(_GN_ATTRS)
    if opset < 21:
        allowed.pop("stash_type")
    attrs = {}
    for a in node.attribute:
        if a.name not in allowed:
            raise ModelError(f"{where}: unknown attribute {quote(a.name)} (GroupNormalization-{opset} takes "
                                f"{', '.join(sorted(allowed))})")
        if a.type != allowed[a.name]:
            raise ModelError(f"{where}: attribute {quote(a.name)} must be "
                                f"{_ATTR_TYPE_NAMES[allowed[a.name]]}, got {_ATTR_TYPE_NAMES.get(a.type, a.type)}")
        attrs[a.name] = _attr_value(a)
    if "num_groups" not in attrs:
        raise ModelError(f"{where}: attribute 'num_groups' is required")
    g = attrs["num_groups"]
    if g <= 0:
        raise ModelError(f"{where}: num_groups must be a positive integer, got {g}")
    eps = attrs.get("epsilon", 1e-5)
    if not (eps >= 0.0) or np.isinf(eps):
        raise ModelError(f"{where}: epsilon must be a finite non-negative number, got {eps}")
    if len(node.input) != 3 or not all(node.input) or len(node.output) != 1:
        raise ModelError(f"{where}: expects inputs (X, scale, bias) and one output, got {len(node.input)} "
                            f"input(s) and {len(node.output)} output(s)")
    x_shape = shapes.of(node.input[0])
    if x_shape is None:
        return
    if len(x_shape) < 2:
        raise ModelError(f"{where}: X must have rank >= 2 (N, C, ...), got shape {_shape_text(x_shape)}")
    c = x_shape[1]
    _check_channels(where, c)
    if isinstance(c, int) and c % g != 0:
        raise ModelError(f"{where}: channels C={c} is not divisible by num_groups={g}")
    want, per = (c, "C") if opset >= 21 else (g, "num_groups")
    for name, value in (("scale", node.input[1]), ("bias", node.input[2])):
        n = shapes.numel(value)
        if isinstance(want, int) and n is not None and n != want:
            raise ModelError(f"{where}: {name} has {n} elements; GroupNormalization-{opset} takes one per "
                                f"{'channel' if opset >= 21 else 'group'} ({per}={want})")


def _check_torch_group_norm_channels(graph: onnx.GraphProto, shapes: _Shapes) -> None:
    """torch's GroupNorm export (Reshape(x, (0, G, -1)) -> InstanceNormalization): x's dim 1 is the channel count
    the fuser expands to."""
    producers = {o: n for n in graph.node for o in n.output}
    for i, node in enumerate(graph.node):
        if node.op_type != "InstanceNormalization" or not node.input:
            continue
        reshape = producers.get(node.input[0])
        if reshape is None or reshape.op_type != "Reshape" or not reshape.input:
            continue
        s = shapes.of(reshape.input[0])
        if s is not None and len(s) >= 2:
            _check_channels(f"GroupNorm before node {_node_name(node, i)}", s[1])


# ---------------------------------------------------------------------------------------------------------------------
# fusedops nodes
# ---------------------------------------------------------------------------------------------------------------------

def _fused_attrs(node: onnx.NodeProto, where: str, spec: catalog.OpSpec) -> dict[str, object]:
    types = {a.name: _ONNX_TYPE[a.type] for a in spec.attrs}
    attrs: dict[str, object] = {}
    for a in node.attribute:
        if a.name not in types:
            raise ModelError(f"{where}: unknown attribute {quote(a.name)}; {spec.name} takes "
                                f"{', '.join(sorted(types))}")
        if a.name in attrs:
            raise ModelError(f"{where}: attribute {quote(a.name)} is given twice")
        if a.type != types[a.name]:
            raise ModelError(f"{where}: attribute {quote(a.name)} must be {_ATTR_TYPE_NAMES[types[a.name]]}, "
                                f"got {_ATTR_TYPE_NAMES.get(a.type, a.type)}")
        v = _attr_value(a)
        if a.type == AttributeProto.STRING:
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ModelError(f"{where}: attribute {quote(a.name)} is not valid UTF-8 (byte "
                                    f"0x{v[e.start]:02x} at offset {e.start})") from None
        attrs[a.name] = v
    return attrs


def _check_fused_node(node: onnx.NodeProto, index: int, shapes: _Shapes) -> catalog.FusedAttrs:
    where = f"fusedops node {_node_name(node, index)}"
    if node.op_type not in catalog.OPS:
        raise ModelError(f"{where}: unknown op {quote(node.op_type)}; known: {', '.join(catalog.OPS)}")
    spec = catalog.OPS[node.op_type]
    try:
        fa = catalog.parse_attrs(node.op_type, _fused_attrs(node, where, spec))
    except catalog.CatalogError as e:
        raise ModelError(f"{where}: {e}") from None
    fixed = len(spec.inputs)
    given = [bool(v) or name in spec.optional for name, v in zip(spec.inputs, node.input)]
    if len(node.input) < fixed or not all(given):
        raise ModelError(f"{where}: {spec.name} needs inputs {', '.join(spec.inputs)}, got "
                            f"{len([i for i in node.input[:fixed] if i])}")
    extras = list(node.input[fixed:])
    if len(extras) < fa.num_extras or not all(extras):
        raise ModelError(f"{where}: chains reference {fa.num_extras} extra input(s), got "
                            f"{len([e for e in extras if e])}")
    if len(extras) > catalog.MAX_EXTRAS:
        raise ModelError(f"{where}: at most {catalog.MAX_EXTRAS} extra inputs, got {len(extras)}")
    if len(node.output) != 1 or not node.output[0]:
        raise ModelError(f"{where}: {spec.name} has exactly one output, got {len(node.output)}")
    x = shapes.of(node.input[0])
    if node.op_type == catalog.GROUP_NORM_ACT.name:
        lo, hi = catalog.GROUP_NORM_ACT.x_rank
        if x is not None and not lo <= len(x) <= hi:
            raise ModelError(f"{where}: X must have rank {lo}-{hi} (N, C, *spatial), got shape {_shape_text(x)}")
        c = x[1] if x is not None else None
    elif node.op_type == catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name:
        c = _check_convtranspose(where, fa, x, shapes.of(node.input[1]))
    else:
        if x is not None and len(x) < 2:
            raise ModelError(f"{where}: X must have rank >= 2 (rows, K), got shape {_shape_text(x)}")
        w = shapes.of(node.input[1])
        if w is not None and len(w) != 2:
            raise ModelError(f"{where}: W must be 2-D, got shape {_shape_text(w)}")
        c = (w[0] if fa.trans_b else w[1]) if w is not None else None
        k = (w[1] if fa.trans_b else w[0]) if w is not None else None
        if x is not None and isinstance(k, int) and isinstance(x[-1], int) and x[-1] != k:
            raise ModelError(f"{where}: X has K={x[-1]} features but W of shape {_shape_text(w)} (trans_b="
                                f"{fa.trans_b}) expects {k}")
    if not isinstance(c, int):
        c = shapes.numel(node.input[spec.inputs.index("gamma")])
    _check_channels(where, c)
    _check_declared_output(node, where, fa, x, c, shapes)
    if isinstance(c, int):
        if c % fa.num_groups != 0:
            raise ModelError(f"{where}: C={c} is not divisible by num_groups={fa.num_groups}")
        named = [(n, node.input[spec.inputs.index(n)]) for n in ("gamma", "beta", "B")
                 if n in spec.inputs and node.input[spec.inputs.index(n)]]
        named += [(f"extra input {k}", e) for k, e in enumerate(extras)]
        for label, value in named:
            n = shapes.numel(value)
            if n is not None and n != c:
                raise ModelError(f"{where}: {label} {quote(value)} has {n} elements, expected C={c}")
    return fa


def _check_convtranspose(where: str, fa: catalog.FusedAttrs, x, w) -> int | None:
    """X and W of a ConvTransposeGroupNormAct against each other and the attributes; returns C where known."""
    lo, hi = catalog.CONVTRANSPOSE_GROUP_NORM_ACT.x_rank
    if x is not None and not lo <= len(x) <= hi:
        raise ModelError(f"{where}: X must have rank {lo}-{hi} (N, Cin, *spatial), got shape {_shape_text(x)}")
    if w is None:
        return None
    rank = fa.conv.spatial_rank
    if (x is not None and len(w) != len(x)) or (rank is not None and len(w) != rank + 2) or len(w) not in (3, 4):
        raise ModelError(f"{where}: W of shape {_shape_text(w)} must be (Cin, C / group, *kernel) with X's rank and "
                         f"the attributes' spatial dims")
    if x is not None and isinstance(x[1], int) and isinstance(w[0], int) and x[1] != w[0]:
        raise ModelError(f"{where}: X has Cin={x[1]} channels but W of shape {_shape_text(w)} expects {w[0]}")
    if isinstance(w[0], int) and w[0] % fa.conv.group:
        raise ModelError(f"{where}: Cin={w[0]} is not divisible by group={fa.conv.group}")
    return w[1] * fa.conv.group if isinstance(w[1], int) else None


def _check_declared_output(node, where: str, fa: catalog.FusedAttrs, x, c, shapes: _Shapes) -> None:
    """A declared output shape that contradicts the op (e.g. C channels declared under a channel reduction)."""
    y = shapes.of(node.output[0])
    if y is None or x is None:
        return
    want = list(x)
    if node.op_type == catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name:  # spatial sizes: checked by the library's rules
        want = [x[0], c if isinstance(c, int) else None] + [None] * (len(x) - 2)
    axis = 1 if node.op_type != catalog.GEMM_GROUP_NORM_ACT.name else len(want) - 1
    if node.op_type == catalog.GEMM_GROUP_NORM_ACT.name:
        want[axis] = c if isinstance(c, int) else None
    if fa.reduce:
        want[axis] = 1
    if len(y) != len(want) or any(a is not None and b is not None and a != b for a, b in zip(y, want)):
        how = f" with reduce={quote(fa.reduce)}" if fa.reduce else ""
        raise ModelError(f"{where}: output {quote(node.output[0])} is declared with shape {_shape_text(y)}, but "
                         f"{node.op_type}{how} produces {_shape_text(want)}")


def _explicit_attributes(node: onnx.NodeProto, fa: catalog.FusedAttrs) -> None:
    del node.attribute[:]
    for k, v in fa.onnx_attrs(node.op_type).items():
        node.attribute.append(onnx.helper.make_attribute(k, v))


# ---------------------------------------------------------------------------------------------------------------------
# Entry
# ---------------------------------------------------------------------------------------------------------------------

def _checker_safety_net(model: onnx.ModelProto) -> None:
    """onnx's checker on the input, after the named checks above: what they do not cover still ends in one line
    (the fused model is checked again, fully, by the fuser). A model with external data is checked by path after
    the fusion instead: the checker looks for the data relative to a folder a ModelProto does not carry."""
    if any(t.data_location == TensorProto.EXTERNAL for t in all_tensors(model)):
        return
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        if "is deprecated in domain_version" in first:
            return  # e.g. GroupNormalization-18 (per-group scale): deprecated, still run by onnxruntime and fused
        raise ModelError(f"the input model is not valid ONNX: {first}") from None
    except (ValueError, MemoryError):
        pass  # a model over protobuf's 2 GB limit: the checker cannot take it in memory; the fuser goes on


def checked_input(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """FusedopsError naming the first problem of ``model`` (see the module doc); otherwise the model, or a copy
    whose fusedops nodes carry every attribute explicitly. ``opset`` is the model's default-domain opset."""
    graph = model.graph
    _check_graph(graph)
    fused = [(i, n) for i, n in enumerate(graph.node) if n.domain == catalog.DOMAIN]
    gn = [(i, n) for i, n in enumerate(graph.node) if n.op_type == "GroupNormalization" and n.domain in ("",
                                                                                                         "ai.onnx")]
    # Attribute checks first: shape inference itself can fail on ill-typed attributes.
    for i, node in fused:
        where = f"fusedops node {_node_name(node, i)}"
        if node.op_type in catalog.OPS:
            _fused_attrs(node, where, catalog.OPS[node.op_type])
    shapes = _Shapes(model) if (fused or gn or any(n.op_type == "InstanceNormalization" for n in graph.node)) \
        else None
    for i, node in gn:
        _check_group_normalization(node, i, opset, shapes)
    if shapes is not None:
        _check_torch_group_norm_channels(graph, shapes)
    _checker_safety_net(model)
    if not fused:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, node in fused:
        fa = _check_fused_node(node, i, shapes)
        _explicit_attributes(out.graph.node[i], fa)
    return out
