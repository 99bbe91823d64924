"""What the fuser's rules share: reading constants, dtypes and shapes off onnx-ir values, and ``Fused``, the state of
one fused node while it grows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import _pattern_ir

from fusedops import catalog

DOMAIN = catalog.DOMAIN
GN = catalog.GROUP_NORM_ACT.name
GEMM_GN = catalog.GEMM_GROUP_NORM_ACT.name
CONVT_GN = catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name
FUSED_OPS = (GN, GEMM_GN, CONVT_GN)  # the fused nodes the fuser reads, reports and gives functions
GROWN_BY_DEFAULT = (GN, GEMM_GN)  # grown by the default rules; CONVT_GN only with the convtranspose option

# X types the fused ops take (catalog, ORT library, TensorRT plugin); their parameters are always written float32.
FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
# Relative spacing of each type's numbers: a constant of a 16-bit graph is the true constant rounded to this.
_REL_SPACING = {np.dtype(np.float16): 2.0 ** -10, "bfloat16": 2.0 ** -7}
# Constants bigger than this are never chain operands (those have at most C elements): leave them unread, so a
# large external weight is not paged in to be looked at.
_MAX_CONST_ELEMENTS = 1 << 22
ORIGINS_KEY = "fusedops.origins"  # node metadata: the GroupNorm sites a fused node stands for (for the report)


def var(name: str, optional: bool = False) -> _pattern_ir.Var:
    return _pattern_ir.Var(name, can_match_none=optional)


def attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


def const(v: ir.Value | None) -> np.ndarray | None:
    if v is None or v.const_value is None:
        return None
    try:
        if v.const_value.size > _MAX_CONST_ELEMENTS:
            return None
        return np.asarray(v.const_value.numpy())
    except Exception:  # external data that is not available
        return None


def rank(v: ir.Value | None) -> int | None:
    return None if v is None or v.shape is None else v.shape.rank()


def dtype_of(v: ir.Value | None) -> ir.DataType | None:
    return None if v is None else v.dtype


def is_fusable_float(v: ir.Value | None) -> bool:
    return v is not None and v.dtype in FLOAT_TYPES


def is_float_array(arr: np.ndarray | None) -> bool:
    """float16/32/64 or ml_dtypes' bfloat16 (which numpy does not count as np.floating)."""
    return arr is not None and (np.issubdtype(arr.dtype, np.floating) or arr.dtype.name == "bfloat16")


def rel_spacing(arr: np.ndarray | None) -> float:
    if arr is None:
        return 0.0
    return _REL_SPACING.get("bfloat16" if arr.dtype.name == "bfloat16" else arr.dtype, 0.0)


def channel_vector(arr: np.ndarray | None, rank_: int, channels: int, axis: int = 1) -> np.ndarray | None:
    """A constant that broadcasts onto a (.., C, ..) tensor of ``rank_`` only along ``axis`` → its (C,) values as
    float32, or None if it would change the tensor's shape or vary along another axis."""
    if arr is None or arr.ndim > rank_ or not is_float_array(arr):
        return None
    if arr.size == 1:
        return np.full((channels,), arr.reshape(()).astype(np.float32), dtype=np.float32)
    padded = (1,) * (rank_ - arr.ndim) + arr.shape
    if padded[axis] != channels or any(d != 1 for i, d in enumerate(padded) if i != axis):
        return None
    return arr.reshape(-1).astype(np.float32)


def operand(arr: np.ndarray | None, rank_: int, channels: int, axis: int) -> float | np.ndarray | None:
    """A scalar (numel 1) or per-channel constant operand, else None."""
    if arr is None or arr.ndim > rank_ or not is_float_array(arr):
        return None
    if arr.size == 1:
        v = float(arr.reshape(()).astype(np.float32))
        return None if math.isnan(v) else v
    return channel_vector(arr, rank_, channels, axis)


def close(arr: np.ndarray | None, want: float, rel: float = 1e-6) -> bool:
    """A scalar constant equal to ``want``: within ``rel``, or within the spacing of a 16-bit constant's type (a
    float16 / bfloat16 graph holds the true constant rounded to its type)."""
    if arr is None or arr.size != 1 or not is_float_array(arr):
        return False
    tol = max(rel, rel_spacing(arr))
    return math.isclose(float(arr.reshape(()).astype(np.float64)), want, rel_tol=tol, abs_tol=1e-7)


def static_dims(v: ir.Value | None) -> list[int] | None:
    """All dims as ints, or None when the shape or any dim is unknown / symbolic."""
    if v is None or v.shape is None:
        return None
    dims = [d for d in v.shape]
    return dims if all(isinstance(d, int) for d in dims) else None


# ---------------------------------------------------------------------------------------------------------------------
# The state of one fused node while it grows
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class Flatten:
    """X of a fused node that must first be reshaped to (-1, channels) (a token GroupNorm whose flatten torch merged
    into GroupNorm's own Reshape); emitted as a Reshape in front of the node."""

    value: ir.Value
    channels: int


@dataclass
class Fused:
    """A fused node's op, attributes and inputs; new tensors (np arrays) become float32 initializers on emission."""

    op_type: str
    attrs: catalog.FusedAttrs
    inputs: list  # ir.Value | np.ndarray | Flatten, in catalog order, then extras
    rank: int  # rank of the normalised tensor: X for GroupNormAct, the GEMM's output for GemmGroupNormAct
    channels: int
    origins: tuple = field(default_factory=tuple)  # GroupNorm sites (report)

    @property
    def axis(self) -> int:
        """The channel axis of the output (1 for GroupNormAct, the last for GemmGroupNormAct)."""
        return self.rank - 1 if self.op_type == GEMM_GN else 1

    @property
    def x_dtype(self) -> ir.DataType | None:
        x = self.inputs[0]
        return x.value.dtype if isinstance(x, Flatten) else x.dtype

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


def output_shape(f: Fused) -> ir.Shape | None:
    """The fused node's output shape from its input X (for outputs the original graph left without a shape)."""
    x = f.inputs[0]
    if isinstance(x, Flatten) or f.op_type == CONVT_GN:  # a ConvTranspose's spatial sizes: left to shape inference
        return None
    if not isinstance(x, ir.Value) or x.shape is None:
        return None
    dims = list(x.shape)
    if f.op_type == GEMM_GN:
        dims[-1] = f.channels
    if f.attrs.reduce:
        dims[f.axis] = 1
    return ir.Shape(dims)


def read_fused(value: ir.Value | None) -> Fused | None:
    node = value.producer() if value is not None else None
    if node is None or node.domain != DOMAIN or node.op_type not in FUSED_OPS:
        return None
    attrs = {k: a.value for k, a in node.attributes.items()}
    fa = catalog.parse_attrs(node.op_type, attrs)
    inputs = list(node.inputs)
    gamma = inputs[catalog.OPS[node.op_type].inputs.index("gamma")]
    r = rank(inputs[0])
    c = gamma.shape[0] if gamma is not None and gamma.shape is not None else None
    if r is None or not isinstance(c, int):
        return None
    return Fused(node.op_type, fa, inputs, r, c, tuple(node.meta.get(ORIGINS_KEY, ())))


def renumber(steps: list[catalog.Step], removed: int) -> list[catalog.Step]:
    """Steps after extra input ``removed`` was dropped: later operand indices move down by one."""
    out = []
    for s in steps:
        if s.kind.binary and isinstance(s.operand, int) and s.operand > removed:
            s = replace(s, operand=s.operand - 1)
        out.append(s)
    return out


def all_values(graph: ir.Graph):
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph:
        yield from node.outputs
