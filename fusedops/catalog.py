"""The fused-op catalog: the custom ONNX ops in domain ``fusedops`` (version 1) for Python.

Its tables (ops, attributes, steps, codes, limits) come from the op spec (``fusedops/spec/ops.toml``, generated into
``fusedops/spec/tables.py``; ``docs/ops.md`` lists them), as do the native side's (``fusedops_spec.h``). Written by
hand here (with chain_syntax.py and reduce.py): the chain grammar's Python parser (the native twin is ``plugins/csrc/core/chain.cpp``), attribute
validation and the PyTorch reference math (``REFERENCE``), which every backend is tested against. Read by the
exporter (which nodes it emits and their ONNX function bodies), the tests, and the runtime adapters.

Ops
---
``GroupNormAct(X, gamma, beta, extra_0, ...) -> Y``
    Y = reduce_C(post(GroupNorm(pre(X)))) for X of shape (N, C, *spatial), 0-3 spatial dims.
``GemmGroupNormAct(X, W, B, gamma, beta, extra_0, ...) -> Y``
    Z = X @ W.T + B (W is (C, K) with trans_b=1, (K, C) with trans_b=0); X of rank > 2 is a batch of rows and every
    row is one sample: Y = reduce_C(post(GroupNorm(pre(Z)))) with Z viewed as (rows, C).
``ConvTransposeGroupNormAct(X, W, B?, gamma, beta, extra_0, ...) -> Y``
    Z = ONNX ConvTranspose(X, W, B) (1 or 2 spatial dims; fusedops/convtranspose.py), then GroupNormAct's part.

Attributes (types chosen so both runtimes can read them: no string lists; INT, INTS, FLOAT, STRING only)
    num_groups INT (required), epsilon FLOAT = 1e-5, pre STRING = "", post STRING = "", reduce STRING = "",
    GemmGroupNormAct only: trans_b INT = 1; allow_tf32 INT = 1 (float32 GEMM: TF32 tensor cores; 0 = strict FP32),
    ConvTransposeGroupNormAct: ConvTranspose's kernel_shape, strides, pads, output_padding, dilations (INTS) and group,
    and on every node plugin_namespace = "fusedops", plugin_version = "1" (TensorRT's ONNX parser picks our plugin
    when it is loaded and falls back to the node's function otherwise).

Chains (``pre`` / ``post``)
    ``step(;step)*`` with ``step = name[(arg,arg)]`` and ``arg = float | @k | inf | -inf``. ``@k`` names the k-th
    extra input, a per-channel tensor of C elements; a float is a scalar operand. Order is preserved.
    ``x + x`` is written ``mul(2)`` (exactly equal in floating point).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from .chain_syntax import (_DIGITS, _NAME_CHARS, _WS, MAX_CHAIN_BYTES, _ascii_text, _float_text,  # noqa: F401
                           _parse_float, _strip, _to_float32, quote)
from .attr_values import float_attr, int_attr, type_name
from .convtranspose import ConvAttrs, conv_transpose, parse_conv_attrs
from .errors import CatalogError, FusedopsError  # noqa: F401 (CatalogError: catalog.CatalogError for callers)
from .reduce import REDUCE_CODES, apply_reduce, parse_reduce  # noqa: F401
from .spec import formula as _formula
from .spec import tables as _spec

DOMAIN = _spec.DOMAIN
VERSION = _spec.VERSION
PLUGIN_NAMESPACE = _spec.PLUGIN_NAMESPACE
PLUGIN_VERSION = _spec.PLUGIN_VERSION
MAX_STEPS = _spec.MAX_STEPS  # FUSEDOPS_MAX_STEPS
MAX_EXTRAS = _spec.MAX_EXTRAS  # FUSEDOPS_MAX_EXTRAS


# ---------------------------------------------------------------------------------------------------------------------
# Elementwise steps
# ---------------------------------------------------------------------------------------------------------------------

def _softplus(x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    return F.softplus(x, beta=beta, threshold=threshold)


# The reference math of every chain step, written by hand in PyTorch (like TensorRT OSS's PluginReference.py) and
# kept apart from the spec's formulas on purpose: every backend (CPU and CUDA kernels, function bodies, ORT library,
# PyTorch ops) and the formulas themselves are tested against it. fn(x, *params) for unary steps, fn(x, v) for binary.
REFERENCE: dict[str, Callable[..., torch.Tensor]] = {
    "add": lambda x, v: x + v,
    "sub": lambda x, v: x - v,
    "mul": lambda x, v: x * v,
    "div": lambda x, v: x / v,
    "rsub": lambda x, v: v - x,
    "rdiv": lambda x, v: v / x,
    "relu": lambda x: torch.relu(x),
    "leaky_relu": lambda x, a: F.leaky_relu(x, a),
    "sigmoid": lambda x: torch.sigmoid(x),
    "silu": lambda x: F.silu(x),
    "tanh": lambda x: torch.tanh(x),
    "hardtanh": lambda x, lo, hi: torch.clamp(x, lo, hi),
    "hardsigmoid": lambda x, a, b: torch.clamp(a * x + b, 0.0, 1.0),
    "hardswish": lambda x: F.hardswish(x),
    "mish": lambda x: x * torch.tanh(_softplus(x, 1.0, 20.0)),
    "softplus": _softplus,
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "softsign": lambda x: F.softsign(x),
}


@dataclass(frozen=True)
class StepKind:
    """One chain step of the op spec (``fusedops/spec/ops.toml``) with its reference math."""

    name: str
    code: int  # fusedops_step_op
    binary: bool = False  # takes one operand: scalar or per-channel extra input
    defaults: tuple[float, ...] = ()  # parameters (unary steps), in order
    fn: Callable[..., torch.Tensor] | None = None  # REFERENCE[name]
    param_names: tuple[str, ...] = ()
    allow_inf: tuple[bool, ...] = ()  # per parameter: may be -inf / inf (else finite)
    nonzero: tuple[bool, ...] = ()  # per parameter: must not be 0
    ordered: bool = False  # parameters (a, b) must satisfy a <= b
    formula: str = ""  # the spec's formula text (fusedops.spec.formula)
    spec: dict = field(default_factory=dict, compare=False, hash=False, repr=False)  # the spec's entry as is

    @property
    def tree(self) -> tuple:
        """The formula parsed (fusedops.spec.formula's tree of tuples)."""
        return _formula_tree(self.name)


def _step_kind(s: dict) -> StepKind:
    params = s.get("params", ())
    return StepKind(s["name"], s["code"], binary=bool(s.get("operand")), defaults=tuple(p["default"] for p in params),
                    fn=REFERENCE[s["name"]], param_names=tuple(p["name"] for p in params),
                    allow_inf=tuple(bool(p.get("allow_inf")) for p in params),
                    nonzero=tuple(bool(p.get("nonzero")) for p in params), ordered=bool(s.get("ordered")),
                    formula=s["formula"], spec=s)


_missing = [s["name"] for s in _spec.STEPS if s["name"] not in REFERENCE]
_unknown = set(REFERENCE) - {s["name"] for s in _spec.STEPS}
if _missing or _unknown:  # a spec edit without its reference math (or the reverse): fail loudly at import
    raise ImportError(f"fusedops.catalog: REFERENCE and the op spec disagree: no reference math for "
                      f"{_missing}, reference math for steps the spec lacks: {sorted(_unknown)}")
STEP_KINDS: dict[str, StepKind] = {s["name"]: _step_kind(s) for s in _spec.STEPS}
STEP_ALIASES = {alias: s["name"] for s in _spec.STEPS for alias in s.get("aliases", ())}


@functools.lru_cache(maxsize=None)
def _formula_tree(name: str) -> tuple:
    k = STEP_KINDS[name]
    return _formula.parse(k.formula, ["x", "v"] if k.binary else ["x", *k.param_names])


@dataclass(frozen=True)
class Step:
    """One step of a chain. For binary steps ``operand`` is a float (scalar) or an int k (extra input k)."""

    name: str
    params: tuple[float, ...] = ()
    operand: float | int | None = None

    @property
    def kind(self) -> StepKind:
        return STEP_KINDS[self.name]

    def text(self) -> str:
        if self.kind.binary:
            return f"{self.name}({_operand_text(self.operand)})"
        if not self.params or self.params == self.kind.defaults:
            return self.name
        return f"{self.name}({','.join(_float_text(p) for p in self.params)})"


def _operand_text(op: float | int | None) -> str:
    if isinstance(op, bool) or op is None:
        raise CatalogError("binary step without operand")
    if isinstance(op, int):
        return f"@{op}"
    return _float_text(op)


def _check_params(kind: StepKind, params: Sequence[float]) -> None:
    """The spec's parameter rules, in the native parser's order: the order rule first (its bounds may be
    infinite), then finiteness, then non-zero parameters."""
    params = [_to_float32(p) for p in params]  # judged as the runtimes see them
    names = kind.param_names
    if kind.ordered and params[0] > params[1]:
        raise CatalogError(f"step {quote(kind.name)} needs {names[0]} <= {names[1]}, got "
                           f"{names[0]}={_float_text(params[0])} and {names[1]}={_float_text(params[1])}")
    if any(math.isinf(p) and not inf_ok for p, inf_ok in zip(params, kind.allow_inf)):
        raise CatalogError(f"parameters of step {quote(kind.name)} must be finite")
    for p, name, nonzero in zip(params, names, kind.nonzero):
        if nonzero and p == 0.0:
            raise CatalogError(f"step {quote(kind.name)} needs {name} != 0")


def parse_chain(text) -> list[Step]:
    """Parse a chain attribute (str or UTF-8 bytes); raises CatalogError naming the bad step. Linear time."""
    if text is None:
        return []
    full = _strip(_ascii_text(text, "chain text"))
    if not full:
        return []
    steps: list[Step] = []
    for raw in full.split(";"):
        st = _strip(raw)
        i = 0
        while i < len(st) and st[i] in _NAME_CHARS:
            i += 1
        name_text = st[:i]
        j = i
        while j < len(st) and st[j] in _WS:
            j += 1
        args: list[str] = []
        ok = bool(name_text)
        if ok and j < len(st):
            inner = st[j + 1:-1]
            ok = st[j] == "(" and st[-1] == ")" and len(st) - 1 > j and "(" not in inner and ")" not in inner
            if ok:
                args = [_strip(a) for a in inner.split(",")]
                if args == [""]:
                    args = []
        if not ok:
            raise CatalogError(f"malformed chain step {quote(st)} in {quote(full)}")
        name = STEP_ALIASES.get(name_text, name_text)
        if name not in STEP_KINDS:
            raise CatalogError(f"unknown chain step {quote(name_text)} in {quote(full)}; known: "
                               f"{', '.join(STEP_KINDS)}")
        kind = STEP_KINDS[name]
        if kind.binary:
            if len(args) != 1:
                raise CatalogError(f"step {quote(name)} takes exactly one operand (a number or @k), got {len(args)}")
            a = args[0]
            if a.startswith("@"):
                digits = a[1:]
                if not digits or any(c not in _DIGITS for c in digits):
                    raise CatalogError(f"bad extra-input reference {quote(a)} in step {quote(name)}")
                significant = digits.lstrip("0") or "0"
                k = int(significant) if len(significant) <= 9 else MAX_EXTRAS  # longer: out of range anyway
                if k >= MAX_EXTRAS:
                    raise CatalogError(f"extra input {quote(a)} out of range in step {quote(name)} (at most "
                                       f"{MAX_EXTRAS} extras, @0..@{MAX_EXTRAS - 1})")
                steps.append(Step(name, operand=k))
            else:
                steps.append(Step(name, operand=_parse_float(a, name)))
        else:
            if len(args) > len(kind.defaults):
                raise CatalogError(
                    f"step {quote(name)} takes at most {len(kind.defaults)} parameter(s), got {len(args)}")
            params = [_parse_float(a, name) for a in args]
            params += list(kind.defaults[len(params):])
            _check_params(kind, params)
            steps.append(Step(name, params=tuple(params)))
    if len(steps) > MAX_STEPS:
        raise CatalogError(f"chain has {len(steps)} steps; at most {MAX_STEPS} are supported")
    return steps


def chain_text(steps: Sequence[Step]) -> str:
    return ";".join(s.text() for s in steps)


def num_extras(*chains: Sequence[Step]) -> int:
    refs = [s.operand for c in chains for s in c if s.kind.binary and isinstance(s.operand, int)
            and not isinstance(s.operand, bool)]
    return max(refs) + 1 if refs else 0


def apply_chain(x: torch.Tensor, steps: Sequence[Step], extras: Sequence[torch.Tensor], channel_dim: int = 1):
    """Apply a chain; extras are (C,) tensors broadcast along ``channel_dim`` of x."""
    for s in steps:
        if s.kind.binary:
            if isinstance(s.operand, int) and not isinstance(s.operand, bool):
                v = extras[s.operand].to(x.dtype)
                shape = [1] * x.dim()
                shape[channel_dim] = -1
                v = v.reshape(shape)
            else:
                v = float(s.operand)
            x = s.kind.fn(x, v)
        else:
            x = s.kind.fn(x, *s.params)
    return x


# ---------------------------------------------------------------------------------------------------------------------
# Op specifications
# ---------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttrSpec:
    name: str
    type: str  # "INT" | "INTS" | "FLOAT" | "STRING"
    default: object  # None = required; INTS: () = ONNX's default
    doc: str


ATTRS: dict[str, AttrSpec] = {name: AttrSpec(name, a["type"], a["default"], a["doc"])
                              for name, a in _spec.ATTRIBUTES.items()}


@dataclass(frozen=True)
class OpSpec:
    name: str
    inputs: tuple[str, ...]  # fixed inputs; then extra_0..extra_{k-1} (variadic, each (C,))
    attrs: tuple[AttrSpec, ...]
    doc: str
    code: int = 0  # fusedops_op
    x_rank: tuple[int, int] = (2, 2)  # X's rank range
    adapters: tuple[str, ...] = ()  # runtime adapters that register the op: "ort", "tensorrt"
    optional: tuple[str, ...] = ()  # fixed inputs a node may leave out (empty name): the kernels read zeros

    def attr(self, name: str) -> AttrSpec:
        return {a.name: a for a in self.attrs}[name]  # KeyError for an unknown name


OPS: dict[str, OpSpec] = {
    o["name"]: OpSpec(o["name"], tuple(i["name"] for i in o["inputs"]), tuple(ATTRS[a] for a in o["attributes"]),
                      o["doc"], o["code"], tuple(o["inputs"][0]["rank"]), tuple(o["adapters"]),
                      tuple(i["name"] for i in o["inputs"] if i.get("optional")))
    for o in _spec.OPS
}
GROUP_NORM_ACT = OPS["GroupNormAct"]
GEMM_GROUP_NORM_ACT = OPS["GemmGroupNormAct"]
CONVTRANSPOSE_GROUP_NORM_ACT = OPS["ConvTransposeGroupNormAct"]


def ops_registered_by(adapter: str) -> tuple[str, ...]:
    """The ops a runtime adapter ("ort", "tensorrt") registers, in spec order."""
    return tuple(name for name, o in OPS.items() if adapter in o.adapters)


@dataclass
class FusedAttrs:
    """Parsed, validated attributes of one fused node (defaults applied)."""

    num_groups: int
    epsilon: float = _spec.ATTRIBUTES["epsilon"]["default"]
    pre: list[Step] = field(default_factory=list)
    post: list[Step] = field(default_factory=list)
    reduce: str = ""
    trans_b: int = _spec.ATTRIBUTES["trans_b"]["default"]
    allow_tf32: int = _spec.ATTRIBUTES["allow_tf32"]["default"]
    conv: ConvAttrs = field(default_factory=ConvAttrs)  # ConvTransposeGroupNormAct only

    @property
    def num_extras(self) -> int:
        return num_extras(self.pre, self.post)

    def onnx_attrs(self, op: str) -> dict[str, object]:
        """Attributes as written on the ONNX node (every attribute explicit, so no runtime relies on defaults)."""
        d: dict[str, object] = {
            "num_groups": int(self.num_groups),
            "epsilon": float(self.epsilon),
            "pre": chain_text(self.pre),
            "post": chain_text(self.post),
            "reduce": self.reduce,
            "plugin_namespace": PLUGIN_NAMESPACE,
            "plugin_version": PLUGIN_VERSION,
        }
        if op == GEMM_GROUP_NORM_ACT.name:
            d["trans_b"] = int(self.trans_b)
        if op in (GEMM_GROUP_NORM_ACT.name, CONVTRANSPOSE_GROUP_NORM_ACT.name):
            d["allow_tf32"] = int(self.allow_tf32)
        if op == CONVTRANSPOSE_GROUP_NORM_ACT.name:
            d.update(self.conv.onnx_attrs())
        return {a.name: d[a.name] for a in OPS[op].attrs if a.name in d}  # the spec's order


MAX_NUM_GROUPS = _spec.MAX_NUM_GROUPS  # int32 in the C ABI's descriptor and TensorRT's INT fields


def parse_attrs(op: str, attrs: dict[str, object]) -> FusedAttrs:
    """Apply defaults and validate attributes of a fused node (raises CatalogError naming the attribute). Values
    must have the attribute's type (INT: int, FLOAT: int or float, STRING: str or UTF-8 bytes)."""
    if op not in OPS:
        raise CatalogError(f"unknown fused op {quote(str(op))}; known: {', '.join(OPS)}")
    spec = OPS[op]
    known = {a.name for a in spec.attrs}
    for k in attrs:
        if k not in known:
            raise CatalogError(f"{op}: unknown attribute {quote(str(k))}; known: {', '.join(sorted(known))}")
    if "num_groups" not in attrs:
        raise CatalogError(f"{op}: attribute 'num_groups' is required")
    g = int_attr(op, "num_groups", attrs["num_groups"])
    if not 0 < g <= MAX_NUM_GROUPS:
        raise CatalogError(f"{op}: num_groups must be positive and at most {MAX_NUM_GROUPS}, got {g}")
    eps = float_attr(op, "epsilon", attrs.get("epsilon", ATTRS["epsilon"].default))
    if not (eps >= 0.0) or math.isinf(eps):
        raise CatalogError(f"{op}: epsilon must be a finite non-negative number, got {eps}")

    def text_attr(name: str, parse):
        try:
            return parse(attrs.get(name, ""))
        except CatalogError as e:
            raise CatalogError(f"{op}: attribute {quote(name)}: {e}") from None

    fa = FusedAttrs(
        num_groups=g,
        epsilon=eps,
        pre=text_attr("pre", parse_chain),
        post=text_attr("post", parse_chain),
        reduce=text_attr("reduce", parse_reduce),
        trans_b=int_attr(op, "trans_b", attrs.get("trans_b", ATTRS["trans_b"].default)),
        allow_tf32=int_attr(op, "allow_tf32", attrs.get("allow_tf32", ATTRS["allow_tf32"].default)),
        conv=parse_conv_attrs(attrs) if op == CONVTRANSPOSE_GROUP_NORM_ACT.name else ConvAttrs(),
    )
    if fa.trans_b not in (0, 1):
        raise CatalogError(f"{op}: trans_b must be 0 or 1, got {fa.trans_b}")
    if fa.allow_tf32 not in (0, 1):
        raise CatalogError(f"{op}: allow_tf32 must be 0 or 1, got {fa.allow_tf32}")
    for key, want in (("plugin_namespace", PLUGIN_NAMESPACE), ("plugin_version", PLUGIN_VERSION)):
        if key in attrs:
            v = attrs[key]
            if not isinstance(v, (str, bytes)):
                raise CatalogError(f"{op}: attribute {quote(key)} must be a STRING, got {type_name(v)}")
            if (v if isinstance(v, str) else v.decode("latin-1")) != want:
                shown = v if isinstance(v, str) else v.decode("utf-8", "backslashreplace")
                raise CatalogError(f"{op}: {key} must be {quote(want)}, got {quote(shown)}")
    return fa


# ---------------------------------------------------------------------------------------------------------------------
# Shape checks and the PyTorch reference
# ---------------------------------------------------------------------------------------------------------------------

def check_group_norm_shapes(op: str, C: int, a: FusedAttrs, gamma, beta, extras) -> None:
    if C % a.num_groups != 0:
        raise CatalogError(f"{op}: C={C} is not divisible by num_groups={a.num_groups}")
    for name, t in (("gamma", gamma), ("beta", beta)):
        if t.numel() != C:
            raise CatalogError(f"{op}: {name} has {t.numel()} elements, expected C={C}")
    if len(extras) < a.num_extras:
        raise CatalogError(f"{op}: chains reference {a.num_extras} extra input(s), got {len(extras)}")
    for k, t in enumerate(extras):
        if t.numel() != C:
            raise CatalogError(f"{op}: extra input {k} has {t.numel()} elements, expected C={C}")


def _group_norm(z: torch.Tensor, groups: int, gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    """F.group_norm, except where it refuses a legal input: with N * (C / G) * S == 1 (one sample, one element a
    group) it raises "Expected more than 1 value per channel when training"; the math is (x - x) / sqrt(0 + eps)."""
    if z.numel() and z.shape[0] * (z.shape[1] // groups) * math.prod(z.shape[2:]) == 1:
        shape = [1, -1] + [1] * (z.dim() - 2)
        return (z - z) * torch.rsqrt(torch.tensor(eps, dtype=z.dtype)) * gamma.reshape(shape) + beta.reshape(shape)
    return F.group_norm(z, groups, gamma, beta, eps)


def group_norm_act_reference(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                             extras: Sequence[torch.Tensor], a: FusedAttrs) -> torch.Tensor:
    """Reference GroupNormAct in x's dtype (pass float64 tensors for a float64 reference)."""
    op = GROUP_NORM_ACT.name
    lo, hi = GROUP_NORM_ACT.x_rank
    if not lo <= x.dim() <= hi:
        raise CatalogError(f"{op}: X must have rank {lo}-{hi} (N, C, *spatial), got shape {tuple(x.shape)}")
    C = x.shape[1]
    check_group_norm_shapes(op, C, a, gamma, beta, extras)
    dt = x.dtype
    # 16-bit inputs: compute in float32 (float32 statistics), return in the input dtype.
    work = x.float() if dt in (torch.float16, torch.bfloat16) else x
    ex = [e.reshape(-1).to(work.dtype) for e in extras]
    z = apply_chain(work, a.pre, ex)
    z = _group_norm(z, a.num_groups, gamma.reshape(-1).to(work.dtype), beta.reshape(-1).to(work.dtype), a.epsilon)
    z = apply_chain(z, a.post, ex)
    z = apply_reduce(z, a.reduce, dim=1)
    return z.to(dt)


def gemm_group_norm_act_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, gamma: torch.Tensor,
                                  beta: torch.Tensor, extras: Sequence[torch.Tensor], a: FusedAttrs) -> torch.Tensor:
    op = GEMM_GROUP_NORM_ACT.name
    if x.dim() < 2:
        raise CatalogError(f"{op}: X must have rank >= 2 (rows, K), got shape {tuple(x.shape)}")
    if w.dim() != 2:
        raise CatalogError(f"{op}: W must be 2-D, got shape {tuple(w.shape)}")
    K = x.shape[-1]
    wk = w.shape[1] if a.trans_b else w.shape[0]
    C = w.shape[0] if a.trans_b else w.shape[1]
    if wk != K:
        raise CatalogError(f"{op}: X has K={K} features but W of shape {tuple(w.shape)} (trans_b={a.trans_b}) "
                           f"expects {wk}")
    if b.numel() != C:
        raise CatalogError(f"{op}: bias B has {b.numel()} elements, expected C={C}")
    check_group_norm_shapes(op, C, a, gamma, beta, extras)
    dt = x.dtype
    wt = w.t() if not a.trans_b else w
    rows = x.reshape(math.prod(x.shape[:-1]), K)  # not -1: with K = 0 the row count would be ambiguous
    z = F.linear(rows, wt.to(dt), b.reshape(-1).to(dt))
    y = group_norm_act_reference(z, gamma, beta, extras, a)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def convtranspose_group_norm_act_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                                           gamma: torch.Tensor, beta: torch.Tensor, extras: Sequence[torch.Tensor],
                                           a: FusedAttrs) -> torch.Tensor:
    """Reference ConvTransposeGroupNormAct in x's dtype (float64 tensors: a float64 reference; 16-bit X: the
    convolution and GroupNorm in float32, as the kernels accumulate, Y in X's dtype)."""
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    z = conv_transpose(work, w.to(work.dtype), None if b is None else b.to(work.dtype), a.conv)
    return group_norm_act_reference(z, gamma, beta, extras, a).to(x.dtype)


def output_shape(op: str, x_shape: Sequence[int], a: FusedAttrs, w_shape: Sequence[int] | None = None) -> tuple:
    if op == GROUP_NORM_ACT.name:
        shape = list(x_shape)
        if a.reduce:
            shape[1] = 1
        return tuple(shape)
    if op == CONVTRANSPOSE_GROUP_NORM_ACT.name:
        spatial = a.conv.output_size(tuple(x_shape[2:]), tuple(w_shape[2:]))
        return (x_shape[0], 1 if a.reduce else w_shape[1] * a.conv.group, *spatial)
    C = w_shape[0] if a.trans_b else w_shape[1]
    return (*x_shape[:-1], 1 if a.reduce else C)
