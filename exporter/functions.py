"""ONNX function bodies (standard ops only) for the fused ``fusedops`` nodes.

Every fused node carries its own chains, so one function per op type cannot express them all. Each distinct
configuration of what a body cannot read from the node (chains, reduction, GEMM layout, number of extra inputs, model
opset) gets its own FunctionProto, told apart by the IR-10 ``overload`` field: ``FunctionProto.overload`` =
``NodeProto.overload`` = a short stable hash of the function body. ``num_groups`` and ``epsilon`` are attribute
references and C / rank come from the input's shape, so they do not split functions. Runtimes without the fusedops library (or a TensorRT parser that falls back to the function)
inline that body and compute exactly the catalog semantics:

    GroupNormAct:      Y = reduce_C(post(GroupNorm(pre(X))))            X: (N, C, *spatial), C on axis 1
    GemmGroupNormAct:  Y = reduce_C(post(GroupNorm(pre(X @ W' + B))))   W' = W^T if trans_b else W; C on the last
                                                                        axis, every row of Z is one sample
    ConvTransposeGroupNormAct: as GroupNormAct on ConvTranspose(X, W, B), the standard op with the node's conv
                       attributes (attribute references; B, optional, goes to ConvTranspose as given: float32)

GroupNorm statistics are per sample and group: mean, then the mean of squared deviations (biased, the stable
two-pass form, in float64), y = (x - mean) / sqrt(var + epsilon) * gamma + beta. NaN and ±inf follow the PyTorch
reference (min / max propagate NaN, logsumexp of a +inf channel is +inf). Bodies compute in float32 whatever X's
type (float32, float16, bfloat16: inputs cast up, Y cast back to X's type; the statistics in float64) and work for
default-domain opsets 17-23: ops whose form changed (Reduce* ``axes``) are emitted in the form of the model's opset,
and ops newer than 17 (Mish 18, Gelu 20) are decomposed.
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Sequence

import numpy as np
import onnx
from onnx import helper

from fusedops import catalog

from . import formula_onnx

MIN_OPSET = 17
MAX_OPSET = 23
SOFTPLUS_THRESHOLD = 20.0  # PyTorch's default: softplus(x) = x where beta * x > threshold


class _Body:
    """Accumulates the nodes of one function body with short, unique value names."""

    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self._n = 0
        self._scalars: dict[float, str] = {}

    def op(self, op_type: str, inputs: Sequence[str], **attrs) -> str:
        out = f"t{self._n}"
        self._n += 1
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, array: np.ndarray) -> str:
        arr = np.asarray(array)
        tensor = onnx.numpy_helper.from_array(arr)
        return self.op("Constant", [], value=tensor)

    def scalar(self, v: float) -> str:
        """A float32 scalar constant (reused within the body)."""
        key = float(np.float32(v))
        if key not in self._scalars:
            self._scalars[key] = self.const(np.array(v, dtype=np.float32))
        return self._scalars[key]

    def attr_ref(self, attr: str, kind: str) -> str:
        """A scalar constant taken from the calling node's attribute (``value_int`` / ``value_float``)."""
        out = f"t{self._n}"
        self._n += 1
        node = helper.make_node("Constant", [], [out])
        ref = onnx.AttributeProto()
        ref.name = f"value_{kind}"
        ref.ref_attr_name = attr
        ref.type = onnx.AttributeProto.INT if kind == "int" else onnx.AttributeProto.FLOAT
        node.attribute.append(ref)
        self.nodes.append(node)
        return out

    def op_with_refs(self, op_type: str, inputs: Sequence[str], refs: dict[str, int]) -> str:
        """A node whose attributes {name: AttributeProto type} are references to the calling node's attributes of
        the same name (one the node leaves out is left out here too: the op's own default)."""
        out = self.op(op_type, inputs)
        for name, kind in refs.items():
            self.nodes[-1].attribute.append(onnx.AttributeProto(name=name, ref_attr_name=name, type=kind))
        return out

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.array(list(values), dtype=np.int64))

    def reduce(self, op_type: str, x: str, axes: Sequence[int]) -> str:
        # ReduceSum takes axes as an input from opset 13, the other reductions from opset 18.
        axes_as_input = self.opset >= 18 or (op_type == "ReduceSum" and self.opset >= 13)
        if axes_as_input:
            return self.op(op_type, [x, self.ints(axes)], keepdims=1)
        return self.op(op_type, [x], axes=list(axes), keepdims=1)


# ---------------------------------------------------------------------------------------------------------------------
# Elementwise steps
# ---------------------------------------------------------------------------------------------------------------------

def _softplus(b: _Body, x: str, beta: float, threshold: float) -> str:
    """PyTorch's softplus: x where beta*x > threshold, else log1p(exp(beta*x)) / beta, computed without overflow as
    max(bx, 0) + log(1 + exp(-|bx|))."""
    bx = x if beta == 1.0 else b.op("Mul", [x, b.scalar(beta)])
    pos = b.op("Max", [bx, b.scalar(0.0)])
    tail = b.op("Log", [b.op("Add", [b.scalar(1.0), b.op("Exp", [b.op("Neg", [b.op("Abs", [bx])])])])])
    sp = b.op("Add", [pos, tail])
    if beta != 1.0:
        sp = b.op("Div", [sp, b.scalar(beta)])
    return b.op("Where", [b.op("Greater", [bx, b.scalar(threshold)]), x, sp])


def _gelu(b: _Body, x: str, p) -> str:  # 0.5 x (1 + erf(x / sqrt(2)))
    e = b.op("Erf", [b.op("Mul", [x, b.scalar(1.0 / math.sqrt(2.0))])])
    return b.op("Mul", [b.op("Mul", [x, b.scalar(0.5)]), b.op("Add", [e, b.scalar(1.0)])])


def _gelu_tanh(b: _Body, x: str, p) -> str:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    x3 = b.op("Mul", [b.op("Mul", [x, x]), x])
    inner = b.op("Mul", [b.op("Add", [x, b.op("Mul", [x3, b.scalar(0.044715)])]), b.scalar(math.sqrt(2.0 / math.pi))])
    return b.op("Mul", [b.op("Mul", [x, b.scalar(0.5)]), b.op("Add", [b.op("Tanh", [inner]), b.scalar(1.0)])])


# Hand-written bodies: the steps whose spec entry has an `onnx` override (tests/test_spec.py checks the two lists
# agree). Every other step's body is generated: its spec onnx_op (from that op's opset), else its formula's
# expansion (formula_onnx).
BODY_OVERRIDES = {
    "silu": lambda b, x, p: b.op("Mul", [x, b.op("Sigmoid", [x])]),
    # Both bounds always given (±inf included): an omitted bound is the type's finite limit in onnxruntime, so
    # Clip(x, inf) gave FLT_MAX where clamp(x, inf, inf) is inf.
    "hardtanh": lambda b, x, p: b.op("Clip", [x, b.scalar(p[0]), b.scalar(p[1])]),
    "mish": lambda b, x, p: b.op("Mul", [x, b.op("Tanh", [_softplus(b, x, 1.0, SOFTPLUS_THRESHOLD)])]),
    "softplus": lambda b, x, p: _softplus(b, x, float(p[0]), float(p[1])),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
}


def _step(b: _Body, x: str, s: catalog.Step, extra) -> str:
    kind = s.kind
    if kind.name in BODY_OVERRIDES:
        return BODY_OVERRIDES[kind.name](b, x, s.params)
    onnx_op = kind.spec.get("onnx_op")
    if onnx_op and b.opset >= onnx_op.get("since", 1):
        return b.op(onnx_op["op"], [x], **{n: float(p) for n, p in zip(kind.param_names, s.params)})
    values = {"x": x}
    if kind.binary:
        values["v"] = extra(s.operand) if isinstance(s.operand, int) else b.scalar(float(s.operand))
    params = dict(zip(kind.param_names, s.params))

    def var(name: str) -> str:
        return values[name] if name in values else b.scalar(float(params[name]))

    return formula_onnx.expand(kind.tree, b.scalar, var, lambda op_type, ins, **kw: b.op(op_type, ins, **kw))


def _chain(b: _Body, x: str, steps: Sequence[catalog.Step], extra) -> str:
    for s in steps:
        x = _step(b, x, s, extra)
    return x


def _reduce_channels(b: _Body, y: str, reduce: str, axis: int) -> str:
    """reduce_C with the reference's NaN / inf semantics (torch.amin / amax / sum / mean / logsumexp)."""
    if reduce == "":
        return y
    if reduce == "logsumexp":
        # Shift by the maximum so large values do not overflow; an infinite maximum is not subtracted (inf - inf
        # would be NaN): shift 0 gives log(sum(exp(y))) = +inf for a +inf channel and -inf when all are -inf.
        m = b.reduce("ReduceMax", y, [axis])
        shift = b.op("Where", [b.op("IsInf", [m]), b.scalar(0.0), m])
        s = b.reduce("ReduceSum", b.op("Exp", [b.op("Sub", [y, shift])]), [axis])
        return _keepdim_shape(b, b.op("Add", [b.op("Log", [s]), shift]), y, axis)
    op_type = {"min": "ReduceMin", "max": "ReduceMax", "sum": "ReduceSum", "mean": "ReduceMean"}[reduce]
    r = b.reduce(op_type, y, [axis])
    if reduce in ("min", "max"):
        # ReduceMin / ReduceMax may skip NaN (onnxruntime does); torch propagates it. Adding the sum of the NaN
        # elements (0 when there are none) restores that without touching ±inf.
        nan_only = b.op("Where", [b.op("IsNaN", [y]), y, b.scalar(0.0)])
        r = b.op("Add", [r, b.reduce("ReduceSum", nan_only, [axis])])
    return _keepdim_shape(b, r, y, axis)


def _keepdim_shape(b: _Body, r: str, y: str, axis: int) -> str:
    """r reshaped to y's shape with 1 on ``axis`` (1 or -1): onnxruntime's reductions return an empty input
    unchanged (N = 0 or S = 0 kept C channels instead of 1); for a non-empty input this is a no-op."""
    if axis == 1:
        parts = [b.op("Shape", [y], start=0, end=1), b.ints([1]), b.op("Shape", [y], start=2)]
    else:
        parts = [b.op("Shape", [y], start=0, end=-1), b.ints([1])]
    return b.op("Reshape", [r, b.op("Concat", parts, axis=0)], allowzero=1)


def _group_norm(b: _Body, x: str, grouped_shape: str, axis: int) -> str:
    """Normalize x viewed as grouped_shape over ``axis`` (the in-group elements); returns x's shape. epsilon is
    the node's attribute. Statistics and normalisation run in float64 (two passes: mean, then the mean of squared
    deviations): float32 accumulation over one large group (millions of elements) lost 1e-3 to 1 of accuracy in
    onnxruntime's reductions, far from the fused kernels' float64-accumulated statistics. A runtime without
    float64 (TensorRT's parser casts it to float32) keeps the float32 two-pass form."""
    # allowzero=1 on the reshapes with computed shapes: a 0 there is a size (S = 0), not "copy this dimension".
    xg = b.op("Cast", [b.op("Reshape", [x, grouped_shape], allowzero=1)], to=onnx.TensorProto.DOUBLE)
    mean = b.reduce("ReduceMean", xg, [axis])
    d = b.op("Sub", [xg, mean])
    # ReduceSumSquare / n: the squares are not materialised (one pass over d, not two).
    bounds = {"start": axis} if axis == -1 else {"start": axis, "end": axis + 1}
    n = b.op("Cast", [b.op("Shape", [xg], **bounds)], to=onnx.TensorProto.DOUBLE)
    var = b.op("Div", [b.reduce("ReduceSumSquare", d, [axis]), n])
    eps = b.op("Cast", [b.attr_ref("epsilon", "float")], to=onnx.TensorProto.DOUBLE)
    rstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, eps])])])  # per group: a multiply, not a divide
    yg = b.op("Cast", [b.op("Mul", [d, rstd])], to=onnx.TensorProto.FLOAT)
    return b.op("Reshape", [yg, b.op("Shape", [x])], allowzero=1)


def _conv_transpose(b: _Body, x: str, w: str) -> str:
    """ONNX ConvTranspose with the node's attributes. B goes in as the node gives it: ConvTranspose's input is
    optional, so a node without B runs too (a Cast of an absent input would not); B must then be float32, as the
    fuser writes every per-channel input."""
    refs = {name: onnx.AttributeProto.INTS for name in _CONV_LISTS}
    return b.op_with_refs("ConvTranspose", [x, w, "B"], {**refs, "group": onnx.AttributeProto.INT})


_CONV_LISTS = [a.name for a in catalog.CONVTRANSPOSE_GROUP_NORM_ACT.attrs if a.type == "INTS"]


# ---------------------------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------------------------

def function_inputs(op: str, num_extras: int) -> list[str]:
    return list(catalog.OPS[op].inputs) + [f"extra_{k}" for k in range(num_extras)]


def build_function(op: str, attrs: catalog.FusedAttrs, rank: int | None, opset: int,
                   num_extras: int | None = None) -> onnx.FunctionProto:
    """The standard-op FunctionProto for fused nodes of this configuration (domain ``fusedops``, name = op type,
    overload = short hash of the body). ``opset`` is the model's default opset (the function imports the same
    version); ``num_extras`` defaults to the extras the chains reference; ``rank`` (of X) is only validated.

    The body is specialised only on what standard ONNX cannot take from the node: the chains, the reduction, the
    GEMM layout (and the opset / number of extras). ``num_groups`` and ``epsilon`` are read from the calling node's
    attributes (attribute references) and C / rank from the input's shape, so nodes that differ only there share
    one function -- which also runs on onnxruntime 1.21-1.26, whose inliner ignores overloads."""
    if op not in catalog.OPS:
        raise catalog.CatalogError(f"unknown fused op {op!r}; known: {', '.join(catalog.OPS)}")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise catalog.CatalogError(f"default-domain opset {opset} is not supported (supported: "
                                   f"{MIN_OPSET}-{MAX_OPSET})")
    n_extras = attrs.num_extras if num_extras is None else num_extras
    if n_extras < attrs.num_extras:
        raise catalog.CatalogError(f"{op}: chains reference {attrs.num_extras} extra input(s), got {n_extras}")
    b = _Body(opset)
    groups = b.op("Reshape", [b.attr_ref("num_groups", "int"), b.ints([1])])  # (1,) int64
    # Dtype typing: one body serves float32, float16 and bfloat16 X (and float32 or X-typed parameters): every input
    # is cast to float32 (a no-op for float32), the math and statistics run in float32, Y is cast to X's type.
    f32 = functools.lru_cache(maxsize=None)(lambda name: b.op("Cast", [name], to=onnx.TensorProto.FLOAT))
    if op in (catalog.GROUP_NORM_ACT.name, catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name):
        lo, hi = catalog.OPS[op].x_rank
        if rank is not None and not lo <= rank <= hi:
            raise catalog.CatalogError(f"{op}: X must have rank {lo}-{hi}, got rank {rank}")
        cache: dict[str, str] = {}

        def channel(name: str) -> str:
            """(C,) → (C, 1, ..., 1): broadcast on axis 1 of (N, C, *spatial), for any rank (a ConvTranspose's
            output has X's rank)."""
            if "shape" not in cache:
                rank_minus_2 = b.op("Sub", [b.op("Shape", [b.op("Shape", ["X"])]), b.ints([2])])
                ones = b.op("ConstantOfShape", [rank_minus_2], value=onnx.numpy_helper.from_array(
                    np.array([1], dtype=np.int64)))
                cache["shape"] = b.op("Concat", [b.ints([-1]), ones], axis=0)
            if name not in cache:
                cache[name] = b.op("Reshape", [f32(name), cache["shape"]])
            return cache[name]

        x = f32("X") if op == catalog.GROUP_NORM_ACT.name else _conv_transpose(b, f32("X"), f32("W"))
        z = _chain(b, x, attrs.pre, lambda k: channel(f"extra_{k}"))
        # (N, G, C/G * S), every dimension explicit: Reshape cannot infer a -1 next to N = 0.
        spatial = b.reduce("ReduceProd", b.op("Concat", [b.op("Shape", [z], start=2), b.ints([1])], axis=0), [0])
        group_len = b.op("Mul", [b.op("Div", [b.op("Shape", [z], start=1, end=2), groups]), spatial])
        grouped = b.op("Concat", [b.op("Shape", [z], start=0, end=1), groups, group_len], axis=0)
        y = _group_norm(b, z, grouped, axis=2)
        y = b.op("Add", [b.op("Mul", [y, channel("gamma")]), channel("beta")])
        y = _chain(b, y, attrs.post, lambda k: channel(f"extra_{k}"))
        y = _reduce_channels(b, y, attrs.reduce, axis=1)
    else:
        if rank is not None and rank < 2:
            raise catalog.CatalogError(f"{op}: X must have rank >= 2, got rank {rank}")
        w = b.op("Transpose", [f32("W")], perm=[1, 0]) if attrs.trans_b else f32("W")
        z = b.op("Add", [b.op("MatMul", [f32("X"), w]), f32("B")])
        # Channels are the last axis; (C,) tensors broadcast there as they are.
        z = _chain(b, z, attrs.pre, lambda k: f32(f"extra_{k}"))
        lead = b.op("Shape", [z], start=0, end=-1)
        # (..., G, C/G): every row its own sample; no -1, so zero rows reshape too.
        group_len = b.op("Div", [b.op("Shape", [z], start=-1), groups])
        grouped = b.op("Concat", [lead, groups, group_len], axis=0)
        y = _group_norm(b, z, grouped, axis=-1)
        y = b.op("Add", [b.op("Mul", [y, f32("gamma")]), f32("beta")])
        y = _chain(b, y, attrs.post, lambda k: f32(f"extra_{k}"))
        y = _reduce_channels(b, y, attrs.reduce, axis=-1)
    b.nodes.append(helper.make_node("CastLike", [y, "X"], ["Y"]))  # back to X's type

    fn = helper.make_function(
        catalog.DOMAIN, op, function_inputs(op, n_extras), ["Y"], b.nodes,
        opset_imports=[helper.make_opsetid("", opset)],
        attributes=[a.name for a in catalog.OPS[op].attrs],  # the node's attributes (baked into the body)
    )
    shown = {k: v for k, v in attrs.onnx_attrs(op).items() if k in ("pre", "post", "reduce", "trans_b")}
    fn.doc_string = (f"{op} {shown}: standard-op body (num_groups, epsilon from the node); the fusedops runtime "
                     f"libraries replace it with a fused kernel")
    fn.overload = body_hash(fn)
    return fn


def body_hash(fn: onnx.FunctionProto) -> str:
    """Short stable hash of a function's signature and body (the overload name)."""
    key = onnx.FunctionProto()
    key.CopyFrom(fn)
    key.overload = ""
    key.doc_string = ""
    return hashlib.sha256(key.SerializeToString(deterministic=True)).hexdigest()[:12]
