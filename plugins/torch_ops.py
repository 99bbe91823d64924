"""PyTorch ops ``fusedops::group_norm_act``, ``fusedops::gemm_group_norm_act`` and
``fusedops::convtranspose_group_norm_act`` (its Python parts in ``torch_convt``).

The ops are the catalog's ``GroupNormAct`` / ``GemmGroupNormAct`` (see ``fusedops.catalog``); attributes travel as
plain ints, floats and strings, exactly as on the ONNX node, so every runtime reads the same text.

They are defined and run in C++ (``plugins/torch/fusedops_torch.cpp``, built as ``libfusedops_torch.so`` by
``fusedops build-native``): a call is one dispatcher hop that finds the plan cached for its attributes, shapes,
dtypes and device and runs it through the C ABI on the current stream — CPU kernels (Eigen GEMM + fused epilogue)
and CUDA kernels (cuBLASLt + one fused epilogue) alike. This module loads that library and adds, in Python, what
PyTorch wants from Python (as pytorch/extension-cpp does):

- the fake kernel: the output shape, with the library's own shape rules validating what is known while tracing;
- autograd: the backward recomputes the forward with the catalog's reference math and differentiates it (also
  twice: a double backward differentiates that recomputation);
- the float64 reference ops the CPU kernel hands float64 inputs to (references in tests and tools).

Precision of the float32 GEMM follows ``allow_tf32``: -1 (default) reads ``torch.get_float32_matmul_precision()``
when the op runs ("highest" → strict FP32, otherwise TF32), 0 / 1 force it. 16-bit inputs run in their own type.

Usage::

    from fusedops.plugins import torch_ops
    y = torch_ops.group_norm_act(x, gamma, beta, [], 8, 1e-5, "gelu")
    y = torch_ops.gemm_group_norm_act(x, w, b, gamma, beta, [bias2], num_groups=256,
                                      pre="add(@0);hardtanh(-1,1);mish")
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Sequence

import torch
from torch import Tensor

from fusedops import catalog
from fusedops.errors import FusedopsError

from . import abi, torch_convt, torch_ops_build
from .torch_support import check_shapes, grads_for, reference_grads, resolve_allow_tf32

__all__ = ["group_norm_act", "gemm_group_norm_act", "convtranspose_group_norm_act", "parsed_attrs",
           "resolve_allow_tf32", "cuda_kernels_available", "chain_number", "load", "plan_kernels", "plan_cache_size",
           "set_poison_outputs"]

_GN = catalog.GROUP_NORM_ACT.name
_GEMM = catalog.GEMM_GROUP_NORM_ACT.name


@functools.lru_cache(maxsize=256)
def parsed_attrs(op: str, num_groups: int, epsilon: float, pre: str, post: str, reduce: str,
                 trans_b: int = 1, allow_tf32: int = 1) -> catalog.FusedAttrs:
    """Parse and validate the attributes once per distinct combination (for the reference math in Python)."""
    attrs: dict[str, object] = {"num_groups": num_groups, "epsilon": epsilon, "pre": pre, "post": post,
                                "reduce": reduce}
    if op == _GEMM:
        attrs.update(trans_b=trans_b, allow_tf32=allow_tf32)
    try:
        return catalog.parse_attrs(op, attrs)
    except catalog.CatalogError as e:
        raise FusedopsError(str(e)) from None


def chain_number(v: float) -> str:
    """A Python float as chain text that parses back to the same double (``repr``; inf as ``inf``)."""
    return repr(float(v))


# ---------------------------------------------------------------------------------------------------------------------
# Loading the C++ ops (once; then the Python registrations that go with them)
# ---------------------------------------------------------------------------------------------------------------------

_lock = threading.Lock()
_loaded: tuple | None = None  # the overloads of group_norm_act, gemm_group_norm_act, convtranspose_group_norm_act
_python_lib = None  # keeps the Python registrations alive


def load() -> tuple:
    """Load ``libfusedops_torch.so`` and register the Python parts; FusedopsError naming the fix when not built."""
    global _loaded, _python_lib
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            # The ops link libfusedops.so: loading it here first applies the Python layer's CPU BLAS choice
            # (plugins/cpu_blas.py) to the instance the CPU GEMM of the ops will run in.
            abi.load()
            torch.ops.load_library(str(torch_ops_build.library()))  # built for this torch (once, if need be)
            _python_lib = _register_python_parts()
            torch.ops.fusedops._set_poison_outputs(os.environ.get("FUSEDOPS_POISON_OUTPUTS") == "1")
            _loaded = (torch.ops.fusedops.group_norm_act.default, torch.ops.fusedops.gemm_group_norm_act.default,
                        torch.ops.fusedops.convtranspose_group_norm_act.default)
    return _loaded


def cuda_kernels_available() -> tuple[bool, str]:
    """(True, "") when the CUDA ops can run here, else (False, reason)."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        load()
        if not abi.has_cuda():
            return False, "libfusedops was built without CUDA (nvcc or cuBLASLt missing when it was configured)"
    except FusedopsError as e:
        return False, str(e)
    return True, ""


def set_poison_outputs(on: bool) -> None:
    """Tests: outputs the ops allocate start as NaN and workspaces as 0xFF bytes (FUSEDOPS_POISON_OUTPUTS=1 at load
    turns it on), so an element a kernel failed to write, or a workspace byte read before written, shows."""
    load()
    torch.ops.fusedops._set_poison_outputs(bool(on))


def set_prepared_weights(on: bool) -> None:
    """Strict-FP32 GEMM calls on the 3xTF32 kernel split W into its TF32 hi and lo parts once per weight tensor and
    keep them (2 x W's bytes) while W lives unchanged (autograd's version counter); on by default. Off: W is split in
    every call (slower, no extra memory) and the kept forms are dropped."""
    load()
    torch.ops.fusedops._set_prepared_weights(bool(on))


def forget_prepared_weights() -> None:
    """Drop the kept split weights: needed after changing a weight behind autograd's back (``w.data[...] = ...``, a
    raw pointer), which the version counter does not see."""
    load()
    torch.ops.fusedops._forget_prepared_weights()


def plan_kernels(x: Tensor, gamma: Tensor, beta: Tensor, extras: Sequence[Tensor], num_groups: int,
                 epsilon: float = 1e-5, pre: str = "", post: str = "", reduce: str = "", w: Tensor | None = None,
                 b: Tensor | None = None, trans_b: int = 1, allow_tf32: int = -1) -> str:
    """Which kernels the plan for these arguments runs (GemmGroupNormAct when ``w`` is given)."""
    load()
    empty = x.new_empty(0)
    try:
        return torch.ops.fusedops._plan_kernels(x, empty if w is None else w, empty if b is None else b, gamma, beta,
                                                list(extras), num_groups, epsilon, pre, post, reduce, trans_b,
                                                allow_tf32)
    except ValueError as e:
        raise FusedopsError(str(e)) from None


def plan_cache_size() -> int:
    """Plans the C++ ops hold (one per configuration: attributes, shapes, dtypes, device)."""
    load()
    return int(torch.ops.fusedops._plan_cache_size())


# ---------------------------------------------------------------------------------------------------------------------
# The ops as Python callables: errors in the caller's input become FusedopsError (the C++ side raises ValueError)
# ---------------------------------------------------------------------------------------------------------------------

def group_norm_act(x: Tensor, gamma: Tensor, beta: Tensor, extras: Sequence[Tensor], num_groups: int,
                   epsilon: float = 1e-5, pre: str = "", post: str = "", reduce: str = "") -> Tensor:
    """Y = reduce_C(post(GroupNorm(pre(X)))); X is (N, C, *spatial) with 0-3 spatial dims."""
    op = (_loaded or load())[0]
    try:
        return op(x, gamma, beta, extras, num_groups, epsilon, pre, post, reduce)
    except ValueError as e:
        raise FusedopsError(str(e)) from None


def gemm_group_norm_act(x: Tensor, w: Tensor, b: Tensor, gamma: Tensor, beta: Tensor, extras: Sequence[Tensor],
                        num_groups: int, epsilon: float = 1e-5, pre: str = "", post: str = "", reduce: str = "",
                        trans_b: int = 1, allow_tf32: int = -1) -> Tensor:
    """Y = reduce_C(post(GroupNorm(pre(X @ W^T + B)))); every row of X is one sample."""
    op = (_loaded or load())[1]
    try:
        return op(x, w, b, gamma, beta, extras, num_groups, epsilon, pre, post, reduce, trans_b, allow_tf32)
    except ValueError as e:
        raise FusedopsError(str(e)) from None


def convtranspose_group_norm_act(x: Tensor, w: Tensor, b: Tensor | None, gamma: Tensor, beta: Tensor,
                                 extras: Sequence[Tensor], num_groups: int, strides: Sequence[int] = (),
                                 pads: Sequence[int] = (), output_padding: Sequence[int] = (),
                                 dilations: Sequence[int] = (), group: int = 1, epsilon: float = 1e-5, pre: str = "",
                                 post: str = "", reduce: str = "", allow_tf32: int = -1) -> Tensor:
    """Y = reduce_C(post(GroupNorm(pre(ConvTranspose(X, W) + B)))) with ONNX ConvTranspose's attributes (``pads``
    as ONNX writes them: begins, then ends; empty lists take ONNX's defaults); 1 or 2 spatial dims."""
    op = (_loaded or load())[2]
    try:
        return op(x, w, b, gamma, beta, list(extras), num_groups, list(strides), list(pads), list(output_padding),
                  list(dilations), group, epsilon, pre, post, reduce, allow_tf32)
    except ValueError as e:
        raise FusedopsError(str(e)) from None


# ---------------------------------------------------------------------------------------------------------------------
# Fake kernels: the library's shape rules on what is known (symbolic sizes are unknown to it), then the output shape
# ---------------------------------------------------------------------------------------------------------------------

def _gn_fake(x, gamma, beta, extras, num_groups, epsilon=1e-5, pre="", post="", reduce=""):
    a = parsed_attrs(_GN, num_groups, epsilon, pre, post, reduce)
    check_shapes(abi.parse_attributes(_GN, a), [x, gamma, beta, *extras])
    return x.new_empty(catalog.output_shape(_GN, tuple(x.shape), a))


def _gemm_fake(x, w, b, gamma, beta, extras, num_groups, epsilon=1e-5, pre="", post="", reduce="", trans_b=1,
               allow_tf32=-1):
    a = parsed_attrs(_GEMM, num_groups, epsilon, pre, post, reduce, trans_b, 1 if allow_tf32 == -1 else allow_tf32)
    check_shapes(abi.parse_attributes(_GEMM, a), [x, w, b, gamma, beta, *extras])
    return x.new_empty(catalog.output_shape(_GEMM, tuple(x.shape), a, tuple(w.shape)))


def _convt_fake(*args):
    return torch_convt.fake(*args)


# ---------------------------------------------------------------------------------------------------------------------
# Autograd: the backward recomputes the forward with the catalog's reference math (PyTorch ops, any device) and
# differentiates that. Correct everywhere, not fused: the fused kernels are for inference; training works but pays
# the unfused cost in the backward pass. Under create_graph the recomputation stays connected to the inputs, so a
# double backward differentiates it again (gradgradcheck in the tests).
# ---------------------------------------------------------------------------------------------------------------------

_GN_DEFAULTS = (None, 1e-5, "", "", "")  # num_groups (always given), epsilon, pre, post, reduce
_GEMM_DEFAULTS = (None, 1e-5, "", "", "", 1, -1)  # ... trans_b, allow_tf32


def _gn_setup_context(ctx, inputs, output) -> None:
    # `inputs` holds the arguments as called: trailing ones left at their defaults may be absent.
    x, gamma, beta, extras, *attrs = inputs
    ctx.save_for_backward(x, gamma, beta, *extras)
    ctx.attrs = tuple(attrs) + _GN_DEFAULTS[len(attrs):]


def _gn_backward(ctx, grad):
    x, gamma, beta, *extras = ctx.saved_tensors
    a = parsed_attrs(_GN, *ctx.attrs)
    g = reference_grads(lambda x_, g_, b_, *e_: catalog.group_norm_act_reference(x_, g_, b_, list(e_), a),
                         (x, gamma, beta, *extras), grad)
    return grads_for(ctx, (g[0], g[1], g[2], list(g[3:])))


def _gemm_setup_context(ctx, inputs, output) -> None:
    x, w, b, gamma, beta, extras, *attrs = inputs
    ctx.save_for_backward(x, w, b, gamma, beta, *extras)
    attrs = tuple(attrs) + _GEMM_DEFAULTS[len(attrs):]
    ctx.attrs = attrs[:-1] + (resolve_allow_tf32(attrs[-1]),)


def _gemm_backward(ctx, grad):
    x, w, b, gamma, beta, *extras = ctx.saved_tensors
    a = parsed_attrs(_GEMM, *ctx.attrs)
    g = reference_grads(
        lambda x_, w_, b_, g_, be_, *e_: catalog.gemm_group_norm_act_reference(x_, w_, b_, g_, be_, list(e_), a),
        (x, w, b, gamma, beta, *extras), grad)
    return grads_for(ctx, (g[0], g[1], g[2], g[3], g[4], list(g[5:])))


# ---------------------------------------------------------------------------------------------------------------------
# float64 on the CPU: the C++ kernel hands it to these reference ops (the catalog's math, in float64)
# ---------------------------------------------------------------------------------------------------------------------

def _gn_reference(x, gamma, beta, extras, num_groups, epsilon, pre, post, reduce):
    a = parsed_attrs(_GN, num_groups, epsilon, pre, post, reduce)
    return catalog.group_norm_act_reference(x, gamma, beta, list(extras), a)


def _gemm_reference(x, w, b, gamma, beta, extras, num_groups, epsilon, pre, post, reduce, trans_b, allow_tf32):
    a = parsed_attrs(_GEMM, num_groups, epsilon, pre, post, reduce, trans_b, allow_tf32)
    return catalog.gemm_group_norm_act_reference(x, w, b, gamma, beta, list(extras), a)


def _register_python_parts():
    lib = torch.library.Library("fusedops", "FRAGMENT")
    lib.define("_reference_group_norm_act(Tensor x, Tensor gamma, Tensor beta, Tensor[] extras, int num_groups, "
               "float epsilon, str pre, str post, str reduce) -> Tensor")
    lib.define("_reference_gemm_group_norm_act(Tensor x, Tensor w, Tensor b, Tensor gamma, Tensor beta, "
               "Tensor[] extras, int num_groups, float epsilon, str pre, str post, str reduce, int trans_b, "
               "int allow_tf32) -> Tensor")
    lib.impl("_reference_group_norm_act", _gn_reference, "CompositeExplicitAutograd")
    lib.impl("_reference_gemm_group_norm_act", _gemm_reference, "CompositeExplicitAutograd")
    torch.library.register_fake("fusedops::group_norm_act", _gn_fake, lib=lib)
    torch.library.register_fake("fusedops::gemm_group_norm_act", _gemm_fake, lib=lib)
    torch.library.register_autograd("fusedops::group_norm_act", _gn_backward, setup_context=_gn_setup_context,
                                    lib=lib)
    torch.library.register_autograd("fusedops::gemm_group_norm_act", _gemm_backward,
                                    setup_context=_gemm_setup_context, lib=lib)
    torch_convt.register(lib)
    torch.library.register_fake("fusedops::convtranspose_group_norm_act", _convt_fake, lib=lib)
    return lib


# Load at import when the library is built, so code that torch.compile / torch.export trace finds the ops ready (the
# loader's lock cannot be traced); when it is not built, the first call says how to build it.
try:
    load()
except FusedopsError:
    pass
