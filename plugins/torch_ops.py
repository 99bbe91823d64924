"""PyTorch custom ops ``fusedops::group_norm_act`` and ``fusedops::gemm_group_norm_act``.

The two ops are the catalog's ``GroupNormAct`` / ``GemmGroupNormAct`` (see ``fusedops.catalog``): attributes travel
as plain ints, floats and strings, exactly as on the ONNX node, so the op schema stays simple and every runtime
reads the same text.

- CPU kernel: the catalog's reference math (defines the semantics everywhere; float64 allowed here for references).
- CUDA kernel: the fusedops C ABI through ``fusedops.plugins.abi`` (one fused kernel; the GEMM variant runs a
  cuBLASLt GEMM with the GroupNorm/activation epilogue).
- Fake kernel: output shape from ``catalog.output_shape``, so ``torch.compile`` and ``torch.export`` trace through.

Autograd: the backward recomputes through the reference math (unfused PyTorch ops) and differentiates it.

Precision of the float32 GEMM follows ``allow_tf32``: -1 (default) reads ``torch.get_float32_matmul_precision()``
when the op runs ("highest" → strict FP32, otherwise TF32), 0 / 1 force it. 16-bit inputs run in their own type.

Usage::

    import fusedops.plugins.torch_ops  # registers the ops
    y = torch.ops.fusedops.group_norm_act(x, gamma, beta, [], 8, 1e-5, "gelu", "", "")
    y = fusedops.plugins.torch_ops.gemm_group_norm_act(x, w, b, gamma, beta, [bias2], num_groups=256,
                                                       pre="add(@0);hardtanh(-1,1);mish")
"""

from __future__ import annotations

import functools
from typing import Sequence

import torch
from torch import Tensor

from fusedops import catalog
from fusedops.errors import FusedopsError

__all__ = ["group_norm_act", "gemm_group_norm_act", "parsed_attrs", "resolve_allow_tf32", "cuda_kernels_available",
           "chain_number"]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CPU_ONLY_DTYPES = (torch.float64,)  # the CPU reference path also runs float64 (for references)


@functools.lru_cache(maxsize=256)
def parsed_attrs(op: str, num_groups: int, epsilon: float, pre: str, post: str, reduce: str,
                 trans_b: int = 1, allow_tf32: int = 1) -> catalog.FusedAttrs:
    """Parse and validate the attributes once per distinct combination (chains are parsed text)."""
    attrs: dict[str, object] = {"num_groups": num_groups, "epsilon": epsilon, "pre": pre, "post": post,
                                "reduce": reduce}
    if op == catalog.GEMM_GROUP_NORM_ACT.name:
        attrs.update(trans_b=trans_b, allow_tf32=allow_tf32)
    try:
        return catalog.parse_attrs(op, attrs)
    except catalog.CatalogError as e:
        raise FusedopsError(str(e)) from None


def chain_number(v: float) -> str:
    """A Python float as chain text that parses back to the same double (``repr``; inf as ``inf``)."""
    return repr(float(v))


def resolve_allow_tf32(allow_tf32: int) -> int:
    """-1 → follow torch.get_float32_matmul_precision() ("highest" = strict FP32); 0/1 pass through."""
    if allow_tf32 not in (-1, 0, 1):
        raise FusedopsError(f"allow_tf32 must be -1 (follow torch), 0 or 1, got {allow_tf32}")
    if allow_tf32 == -1:
        return 0 if torch.get_float32_matmul_precision() == "highest" else 1
    return allow_tf32


# ---------------------------------------------------------------------------------------------------------------------
# Input validation shared by every kernel (the fake one included, so export/compile fail early with the same text)
# ---------------------------------------------------------------------------------------------------------------------

def _check_float(op: str, name: str, t: Tensor, allowed: Sequence[torch.dtype]) -> None:
    if t.dtype not in allowed:
        raise FusedopsError(f"{op}: {name} has dtype {t.dtype}; supported: "
                            + ", ".join(str(d).replace("torch.", "") for d in allowed))


def _allowed_dtypes(x: Tensor) -> tuple[torch.dtype, ...]:
    return SUPPORTED_DTYPES + CPU_ONLY_DTYPES if x.device.type in ("cpu", "meta") else SUPPORTED_DTYPES


def _check_params(op: str, x: Tensor, C: int, a: catalog.FusedAttrs, named: Sequence[tuple[str, Tensor]],
                  extras: Sequence[Tensor]) -> None:
    allowed = _allowed_dtypes(x)
    for name, t in list(named) + [(f"extra input {k}", e) for k, e in enumerate(extras)]:
        _check_float(op, name, t, allowed)
        if t.device != x.device:
            raise FusedopsError(f"{op}: {name} is on {t.device} but X is on {x.device}")
        if t.numel() != C:
            raise FusedopsError(f"{op}: {name} has {t.numel()} elements, expected C={C}")
    if C % a.num_groups != 0:
        raise FusedopsError(f"{op}: C={C} is not divisible by num_groups={a.num_groups}")
    if len(extras) < a.num_extras:
        raise FusedopsError(f"{op}: chains reference {a.num_extras} extra input(s) (@0..@{a.num_extras - 1}), "
                            f"got {len(extras)}")
    if len(extras) > catalog.MAX_EXTRAS:
        raise FusedopsError(f"{op}: at most {catalog.MAX_EXTRAS} extra inputs, got {len(extras)}")


def _check_group_norm_act(x: Tensor, gamma: Tensor, beta: Tensor, extras: Sequence[Tensor],
                          a: catalog.FusedAttrs) -> None:
    op = catalog.GROUP_NORM_ACT.name
    _check_float(op, "X", x, _allowed_dtypes(x))
    if x.dim() < 2 or x.dim() > 5:
        raise FusedopsError(f"{op}: X must have rank 2-5 (N, C, *spatial), got shape {tuple(x.shape)}")
    _check_params(op, x, x.shape[1], a, (("gamma", gamma), ("beta", beta)), extras)


def _gemm_channels(x: Tensor, w: Tensor, a: catalog.FusedAttrs) -> int:
    op = catalog.GEMM_GROUP_NORM_ACT.name
    if x.dim() < 2:
        raise FusedopsError(f"{op}: X must have rank >= 2 (rows, K), got shape {tuple(x.shape)}")
    if w.dim() != 2:
        raise FusedopsError(f"{op}: W must be 2-D, got shape {tuple(w.shape)}")
    K = x.shape[-1]
    wk, C = (w.shape[1], w.shape[0]) if a.trans_b else (w.shape[0], w.shape[1])
    if wk != K:
        raise FusedopsError(f"{op}: X has K={K} features but W of shape {tuple(w.shape)} (trans_b={a.trans_b}) "
                            f"expects {wk}")
    return C


def _check_gemm_group_norm_act(x: Tensor, w: Tensor, b: Tensor, gamma: Tensor, beta: Tensor,
                               extras: Sequence[Tensor], a: catalog.FusedAttrs) -> None:
    op = catalog.GEMM_GROUP_NORM_ACT.name
    _check_float(op, "X", x, _allowed_dtypes(x))
    C = _gemm_channels(x, w, a)
    if w.dtype != x.dtype:
        raise FusedopsError(f"{op}: W has dtype {w.dtype} but X has {x.dtype}; they must match")
    if w.device != x.device:
        raise FusedopsError(f"{op}: W is on {w.device} but X is on {x.device}")
    _check_params(op, x, C, a, (("bias B", b), ("gamma", gamma), ("beta", beta)), extras)


# ---------------------------------------------------------------------------------------------------------------------
# group_norm_act
# ---------------------------------------------------------------------------------------------------------------------

_GN = catalog.GROUP_NORM_ACT.name
_GEMM = catalog.GEMM_GROUP_NORM_ACT.name


# Explicit schemas: attributes are plain `int` (not SymInt): they are node attributes, never shapes.
_GN_SCHEMA = ("(Tensor x, Tensor gamma, Tensor beta, Tensor[] extras, int num_groups, float epsilon=1e-05, "
              "str pre=\"\", str post=\"\", str reduce=\"\") -> Tensor")
_GEMM_SCHEMA = ("(Tensor x, Tensor w, Tensor b, Tensor gamma, Tensor beta, Tensor[] extras, int num_groups, "
                "float epsilon=1e-05, str pre=\"\", str post=\"\", str reduce=\"\", int trans_b=1, "
                "int allow_tf32=-1) -> Tensor")


@torch.library.custom_op("fusedops::group_norm_act", mutates_args=(), device_types="cpu", schema=_GN_SCHEMA)
def group_norm_act(x: Tensor, gamma: Tensor, beta: Tensor, extras: list[Tensor], num_groups: int,
                   epsilon: float = 1e-5, pre: str = "", post: str = "", reduce: str = "") -> Tensor:
    """Y = reduce_C(post(GroupNorm(pre(X)))); X is (N, C, *spatial) with 0-3 spatial dims."""
    a = parsed_attrs(_GN, num_groups, epsilon, pre, post, reduce)
    _check_group_norm_act(x, gamma, beta, extras, a)
    return catalog.group_norm_act_reference(x.contiguous(), gamma, beta, list(extras), a)


@group_norm_act.register_kernel("cuda")
def _group_norm_act_cuda(x: Tensor, gamma: Tensor, beta: Tensor, extras: list[Tensor], num_groups: int,
                         epsilon: float = 1e-5, pre: str = "", post: str = "", reduce: str = "") -> Tensor:
    a = parsed_attrs(_GN, num_groups, epsilon, pre, post, reduce)
    _check_group_norm_act(x, gamma, beta, extras, a)
    abi = _abi()
    return abi.groupnorm_act_cuda(x.contiguous(), gamma.contiguous(), beta.contiguous(),
                                  [e.contiguous() for e in extras], a)


@group_norm_act.register_fake
def _group_norm_act_fake(x: Tensor, gamma: Tensor, beta: Tensor, extras: list[Tensor], num_groups: int,
                         epsilon: float = 1e-5, pre: str = "", post: str = "", reduce: str = "") -> Tensor:
    a = parsed_attrs(_GN, num_groups, epsilon, pre, post, reduce)
    _check_group_norm_act(x, gamma, beta, extras, a)
    return x.new_empty(catalog.output_shape(_GN, tuple(x.shape), a))


# ---------------------------------------------------------------------------------------------------------------------
# gemm_group_norm_act
# ---------------------------------------------------------------------------------------------------------------------

@torch.library.custom_op("fusedops::gemm_group_norm_act", mutates_args=(), device_types="cpu", schema=_GEMM_SCHEMA)
def gemm_group_norm_act(x: Tensor, w: Tensor, b: Tensor, gamma: Tensor, beta: Tensor, extras: list[Tensor],
                        num_groups: int, epsilon: float = 1e-5, pre: str = "", post: str = "", reduce: str = "",
                        trans_b: int = 1, allow_tf32: int = -1) -> Tensor:
    """Y = reduce_C(post(GroupNorm(pre(X @ W^T + B)))); every row of X is one sample."""
    a = parsed_attrs(_GEMM, num_groups, epsilon, pre, post, reduce, trans_b, resolve_allow_tf32(allow_tf32))
    _check_gemm_group_norm_act(x, w, b, gamma, beta, extras, a)
    return catalog.gemm_group_norm_act_reference(x.contiguous(), w.contiguous(), b, gamma, beta, list(extras), a)


@gemm_group_norm_act.register_kernel("cuda")
def _gemm_group_norm_act_cuda(x: Tensor, w: Tensor, b: Tensor, gamma: Tensor, beta: Tensor, extras: list[Tensor],
                              num_groups: int, epsilon: float = 1e-5, pre: str = "", post: str = "",
                              reduce: str = "", trans_b: int = 1, allow_tf32: int = -1) -> Tensor:
    tf32 = resolve_allow_tf32(allow_tf32)
    a = parsed_attrs(_GEMM, num_groups, epsilon, pre, post, reduce, trans_b, tf32)
    _check_gemm_group_norm_act(x, w, b, gamma, beta, extras, a)
    abi = _abi()
    return abi.gemm_groupnorm_act_cuda(x.contiguous(), w.contiguous(), b.contiguous(), gamma.contiguous(),
                                       beta.contiguous(), [e.contiguous() for e in extras], a, tf32)


@gemm_group_norm_act.register_fake
def _gemm_group_norm_act_fake(x: Tensor, w: Tensor, b: Tensor, gamma: Tensor, beta: Tensor, extras: list[Tensor],
                              num_groups: int, epsilon: float = 1e-5, pre: str = "", post: str = "",
                              reduce: str = "", trans_b: int = 1, allow_tf32: int = -1) -> Tensor:
    a = parsed_attrs(_GEMM, num_groups, epsilon, pre, post, reduce, trans_b, 1 if allow_tf32 == -1 else allow_tf32)
    _check_gemm_group_norm_act(x, w, b, gamma, beta, extras, a)
    return x.new_empty(catalog.output_shape(_GEMM, tuple(x.shape), a, tuple(w.shape)))


# ---------------------------------------------------------------------------------------------------------------------
# Autograd: the backward recomputes the forward with the catalog's reference math (PyTorch ops, any device) and
# differentiates that. Correct everywhere, not fused: the fused kernels are for inference; training works but pays
# the unfused cost in the backward pass.
# ---------------------------------------------------------------------------------------------------------------------

_GN_DEFAULTS = (None, 1e-5, "", "", "")  # num_groups (always given), epsilon, pre, post, reduce
_GEMM_DEFAULTS = (None, 1e-5, "", "", "", 1, -1)  # ... trans_b, allow_tf32


def _grads_for(ctx, tensor_grads: tuple) -> tuple:
    """Pad with None for the attribute arguments. The count comes from ctx.needs_input_grad: PyTorch hands the op's
    autograd.Function the arguments as called (trailing defaults dropped) and expects one entry for each."""
    n = len(ctx.needs_input_grad)
    return tensor_grads + (None,) * (n - len(tensor_grads))


def _reference_grads(fn, tensors: Sequence[Tensor], grad: Tensor) -> tuple:
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(t.requires_grad or t.is_floating_point()) for t in tensors]
        y = fn(*leaves)
        return torch.autograd.grad(y, leaves, grad, allow_unused=True)


def _gn_setup_context(ctx, inputs, output) -> None:
    # `inputs` holds the arguments as called: trailing ones left at their defaults may be absent.
    x, gamma, beta, extras, *attrs = inputs
    ctx.save_for_backward(x, gamma, beta, *extras)
    ctx.attrs = tuple(attrs) + _GN_DEFAULTS[len(attrs):]


def _gn_backward(ctx, grad):
    x, gamma, beta, *extras = ctx.saved_tensors
    a = parsed_attrs(_GN, *ctx.attrs)
    g = _reference_grads(lambda x_, g_, b_, *e_: catalog.group_norm_act_reference(x_, g_, b_, list(e_), a),
                         (x, gamma, beta, *extras), grad)
    return _grads_for(ctx, (g[0], g[1], g[2], list(g[3:])))


def _gemm_setup_context(ctx, inputs, output) -> None:
    x, w, b, gamma, beta, extras, *attrs = inputs
    ctx.save_for_backward(x, w, b, gamma, beta, *extras)
    attrs = tuple(attrs) + _GEMM_DEFAULTS[len(attrs):]
    ctx.attrs = attrs[:-1] + (resolve_allow_tf32(attrs[-1]),)


def _gemm_backward(ctx, grad):
    x, w, b, gamma, beta, *extras = ctx.saved_tensors
    a = parsed_attrs(_GEMM, *ctx.attrs)
    g = _reference_grads(
        lambda x_, w_, b_, g_, be_, *e_: catalog.gemm_group_norm_act_reference(x_, w_, b_, g_, be_, list(e_), a),
        (x, w, b, gamma, beta, *extras), grad)
    return _grads_for(ctx, (g[0], g[1], g[2], g[3], g[4], list(g[5:])))


group_norm_act.register_autograd(_gn_backward, setup_context=_gn_setup_context)
gemm_group_norm_act.register_autograd(_gemm_backward, setup_context=_gemm_setup_context)


# ---------------------------------------------------------------------------------------------------------------------
# The CUDA library
# ---------------------------------------------------------------------------------------------------------------------

def _abi():
    """The ctypes binding of the native library (imported on first CUDA call; a clear error if it is missing)."""
    try:
        from fusedops.plugins import abi
    except ImportError as e:  # the binding module itself is missing
        raise FusedopsError(f"fusedops CUDA kernels unavailable: cannot import fusedops.plugins.abi ({e})") from None
    return abi


def cuda_kernels_available() -> tuple[bool, str]:
    """(True, "") when a CUDA device and the native library with CUDA kernels are present, else (False, reason)."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        abi = _abi()
        if hasattr(abi, "has_cuda") and not abi.has_cuda():
            return False, "the fusedops native library was built without CUDA kernels"
    except Exception as e:  # noqa: BLE001 - any failure to load the library is a reason to skip
        return False, f"fusedops native library not loadable: {e}"
    return True, ""
