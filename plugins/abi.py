"""ctypes mirror of the fusedops C ABI (``plugins/include/fusedops/fusedops.h``) and torch-tensor entry points.

Stable entry points (the PyTorch custom ops are built on these two; keep their signatures):

    groupnorm_act_cuda(x, gamma, beta, extras, attrs, out=None, stream=None) -> Tensor
    gemm_groupnorm_act_cuda(x, w, b, gamma, beta, extras, attrs, allow_tf32, out=None, stream=None) -> Tensor

``attrs`` is a :class:`fusedops.catalog.FusedAttrs`. Tensors are CUDA tensors on one device; X/W/Y are float32, float16
or bfloat16 (W is converted to X's dtype if it differs, as the catalog reference does); gamma, beta, the bias and the
extras share one dtype (converted to float32 if they do not). The kernels run on ``stream`` (a torch.cuda.Stream;
default: the current stream); the workspace comes from torch's caching allocator on that stream. Nothing synchronises.

Also: ``load()``, ``has_cuda()``, ``version()``, ``parse_chain(text)`` (the native parser), the descriptor builders
``groupnorm_desc`` / ``gemm_desc`` and the CPU entries ``groupnorm_act_cpu`` / ``gemm_groupnorm_act_cpu``.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, byref, c_char_p, c_float, c_int32, c_int64, c_size_t, c_void_p
from typing import Sequence

import torch

from fusedops import catalog
from fusedops.errors import FusedopsError

from . import native

MAX_STEPS = 16
MAX_EXTRAS = 8

OK, ERR_INVALID_ARGUMENT, ERR_UNSUPPORTED, ERR_WORKSPACE, ERR_CUDA, ERR_NOT_BUILT = range(6)
STATUS_NAMES = {0: "ok", 1: "invalid argument", 2: "unsupported", 3: "workspace too small", 4: "CUDA error",
                5: "not built"}
F32, F16, BF16 = 0, 1, 2
DTYPE_CODES = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}


class Step(ctypes.Structure):
    _fields_ = [("op", c_int32), ("operand", c_int32), ("a", c_float), ("b", c_float)]


class Chain(ctypes.Structure):
    _fields_ = [("num_steps", c_int32), ("steps", Step * MAX_STEPS)]


class GroupNormDesc(ctypes.Structure):
    _fields_ = [("N", c_int64), ("C", c_int64), ("S", c_int64), ("num_groups", c_int32), ("epsilon", c_float),
                ("pre", Chain), ("post", Chain), ("reduce", c_int32), ("x_dtype", c_int32),
                ("param_dtype", c_int32)]


class GemmDesc(ctypes.Structure):
    _fields_ = [("gn", GroupNormDesc), ("K", c_int64), ("trans_b", c_int32), ("allow_tf32", c_int32)]


# ---------------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------------

_lib: ctypes.CDLL | None = None
_lock = threading.Lock()


def load() -> ctypes.CDLL:
    """The cached ``libfusedops.so``; FusedopsError if it has not been built."""
    global _lib
    with _lock:
        if _lib is None:
            path = native.library_path("fusedops")
            if path is None:
                raise FusedopsError(f"libfusedops.so not found in {native.build_dir() / 'lib'}; build it with "
                                    "`fusedops build-native` (or set FUSEDOPS_BUILD_DIR)")
            lib = ctypes.CDLL(str(path))
            _declare(lib)
            _lib = lib
    return _lib


def _declare(lib: ctypes.CDLL) -> None:
    gn, gm = POINTER(GroupNormDesc), POINTER(GemmDesc)
    pp = POINTER(c_void_p)
    sig = {
        "fusedops_parse_chain": (ctypes.c_int, [c_char_p, POINTER(Chain), c_char_p, c_size_t]),
        "fusedops_parse_reduce": (ctypes.c_int, [c_char_p, POINTER(c_int32), c_char_p, c_size_t]),
        "fusedops_num_extras": (c_int32, [POINTER(Chain), POINTER(Chain)]),
        "fusedops_groupnorm_act_check": (ctypes.c_int, [gn, c_char_p, c_size_t]),
        "fusedops_gemm_groupnorm_act_check": (ctypes.c_int, [gm, c_char_p, c_size_t]),
        "fusedops_groupnorm_act_workspace_size": (c_size_t, [gn]),
        "fusedops_gemm_groupnorm_act_workspace_size": (c_size_t, [gm]),
        "fusedops_groupnorm_act_cuda": (ctypes.c_int, [gn, c_void_p, c_void_p, c_void_p, pp, c_int32, c_void_p,
                                                       c_void_p, c_size_t, c_void_p, c_char_p, c_size_t]),
        "fusedops_gemm_groupnorm_act_cuda": (ctypes.c_int, [gm, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                                            pp, c_int32, c_void_p, c_void_p, c_size_t, c_void_p,
                                                            c_char_p, c_size_t]),
        "fusedops_groupnorm_act_cpu": (ctypes.c_int, [gn, c_void_p, c_void_p, c_void_p, pp, c_int32, c_void_p,
                                                      c_char_p, c_size_t]),
        "fusedops_gemm_groupnorm_act_cpu": (ctypes.c_int, [gm, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, pp,
                                                           c_int32, c_void_p, c_char_p, c_size_t]),
        "fusedops_has_cuda": (ctypes.c_int, []),
        "fusedops_version": (c_char_p, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def has_cuda() -> bool:
    """True if the built library has the CUDA entries (False when built without nvcc/cuBLASLt)."""
    return bool(load().fusedops_has_cuda())


def version() -> str:
    return load().fusedops_version().decode()


def _raise(fn: str, rc: int, err: ctypes.Array) -> None:
    msg = err.value.decode(errors="replace") or STATUS_NAMES.get(rc, f"status {rc}")
    text = f"{fn}: {msg}"
    if rc == ERR_CUDA:
        raise RuntimeError(text)
    raise FusedopsError(text)


# ---------------------------------------------------------------------------------------------------------------------
# Descriptors
# ---------------------------------------------------------------------------------------------------------------------

def chain_struct(steps: Sequence[catalog.Step]) -> Chain:
    """A catalog chain as the ABI's fusedops_chain (step codes are the catalog's)."""
    if len(steps) > MAX_STEPS:
        raise FusedopsError(f"chain has {len(steps)} steps; at most {MAX_STEPS} are supported")
    ch = Chain()
    ch.num_steps = len(steps)
    for i, s in enumerate(steps):
        st = ch.steps[i]
        st.op = s.kind.code
        st.operand, st.a, st.b = -1, 0.0, 0.0
        if s.kind.binary:
            if isinstance(s.operand, int) and not isinstance(s.operand, bool):
                st.operand = s.operand
            else:
                st.a = float(s.operand)
        else:
            if len(s.params) > 0:
                st.a = float(s.params[0])
            if len(s.params) > 1:
                st.b = float(s.params[1])
    return ch


def parse_chain(text: str) -> Chain:
    """Parse chain text with the native parser (FusedopsError naming the problem)."""
    ch, err = Chain(), ctypes.create_string_buffer(512)
    rc = load().fusedops_parse_chain(text.encode(), byref(ch), err, len(err))
    if rc != OK:
        _raise("fusedops_parse_chain", rc, err)
    return ch


def _dtype_code(dt: torch.dtype, what: str) -> int:
    if dt not in DTYPE_CODES:
        raise FusedopsError(f"{what} has dtype {dt}; fusedops kernels take float32, float16 or bfloat16")
    return DTYPE_CODES[dt]


def groupnorm_desc(attrs: catalog.FusedAttrs, N: int, C: int, S: int, x_dtype: torch.dtype,
                   param_dtype: torch.dtype) -> GroupNormDesc:
    d = GroupNormDesc()
    d.N, d.C, d.S = int(N), int(C), int(S)
    d.num_groups = int(attrs.num_groups)
    d.epsilon = float(attrs.epsilon)
    d.pre = chain_struct(attrs.pre)
    d.post = chain_struct(attrs.post)
    d.reduce = catalog.REDUCE_CODES[attrs.reduce]
    d.x_dtype = _dtype_code(x_dtype, "X")
    d.param_dtype = _dtype_code(param_dtype, "gamma/beta")
    return d


def gemm_desc(attrs: catalog.FusedAttrs, M: int, C: int, K: int, x_dtype: torch.dtype, param_dtype: torch.dtype,
              allow_tf32: int) -> GemmDesc:
    d = GemmDesc()
    d.gn = groupnorm_desc(attrs, M, C, 1, x_dtype, param_dtype)
    d.K = int(K)
    d.trans_b = int(attrs.trans_b)
    d.allow_tf32 = int(bool(allow_tf32))
    return d


# ---------------------------------------------------------------------------------------------------------------------
# Tensor helpers
# ---------------------------------------------------------------------------------------------------------------------

def _check_tensor(t, name: str, device: torch.device | None, op: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise FusedopsError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if device is not None:
        if t.device != device:
            raise FusedopsError(f"{op}: {name} is on {t.device}, expected {device}")
    if not t.is_contiguous():
        raise FusedopsError(f"{op}: {name} must be contiguous (call .contiguous())")


def _params(op: str, C: int, named: list[tuple[str, torch.Tensor]]) -> tuple[list[torch.Tensor], torch.dtype]:
    """Per-channel parameters as one dtype (their own if shared, else float32), each with C elements."""
    for name, t in named:
        if t.numel() != C:
            raise FusedopsError(f"{op}: {name} has {t.numel()} elements, expected C={C}")
    dtypes = {t.dtype for _, t in named}
    if len(dtypes) == 1 and next(iter(dtypes)) in DTYPE_CODES:
        pdt = next(iter(dtypes))
    else:
        pdt = torch.float32
    return [t.reshape(-1).to(pdt).contiguous() for _, t in named], pdt


def _ptr_array(ts: Sequence[torch.Tensor]):
    arr = (c_void_p * max(1, len(ts)))()
    for i, t in enumerate(ts):
        arr[i] = t.data_ptr()
    return arr


def _check_extras(op: str, extras: Sequence[torch.Tensor], attrs: catalog.FusedAttrs) -> None:
    if len(extras) < attrs.num_extras:
        raise FusedopsError(f"{op}: chains reference {attrs.num_extras} extra input(s), got {len(extras)}")
    if len(extras) > MAX_EXTRAS:
        raise FusedopsError(f"{op}: {len(extras)} extra inputs; at most {MAX_EXTRAS} are supported")


def poisoning() -> bool:
    """FUSEDOPS_POISON_OUTPUTS=1: outputs the entries allocate start as NaN and workspaces as 0xFF bytes (NaN as
    float), so a test that goes through the ops or the fused models (where it cannot pass ``out``) still sees any
    element a kernel failed to write, or any workspace byte read before it was written. Off by default: it costs a
    fill per call."""
    return os.environ.get("FUSEDOPS_POISON_OUTPUTS") == "1"


def _alloc(shape, dtype: torch.dtype, device) -> torch.Tensor:
    if not poisoning():
        return torch.empty(shape, dtype=dtype, device=device)
    shape = (shape,) if isinstance(shape, int) else shape
    return torch.full(shape, 0xFF if dtype == torch.uint8 else float("nan"), dtype=dtype, device=device)


def _check_out(op: str, out: torch.Tensor | None, shape: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    if out is None:
        return _alloc(shape, dtype, device)
    _check_tensor(out, "out", device, op)
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype:
        raise FusedopsError(f"{op}: out has shape {tuple(out.shape)} and dtype {out.dtype}, expected {tuple(shape)} "
                            f"and {dtype}")
    return out


# ---------------------------------------------------------------------------------------------------------------------
# CUDA entries
# ---------------------------------------------------------------------------------------------------------------------

def groupnorm_act_cuda(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, extras: Sequence[torch.Tensor],
                       attrs: catalog.FusedAttrs, out: torch.Tensor | None = None,
                       stream: torch.cuda.Stream | None = None) -> torch.Tensor:
    """GroupNormAct on CUDA: Y = reduce_C(post(GroupNorm(pre(X)))), X (N, C, *spatial) of rank 2-5.

    Returns ``out`` (allocated if None) of shape catalog.output_shape(...), X's dtype. Asynchronous on ``stream``.
    """
    op = "GroupNormAct"
    _check_tensor(x, "X", None, op)
    if x.device.type != "cuda":
        raise FusedopsError(f"{op}: X must be a CUDA tensor, got device {x.device}")
    if not 2 <= x.dim() <= 5:
        raise FusedopsError(f"{op}: X must have rank 2-5 (N, C, *spatial), got shape {tuple(x.shape)}")
    _dtype_code(x.dtype, f"{op}: X")
    dev = x.device
    for name, t in [("gamma", gamma), ("beta", beta)] + [(f"extra {k}", e) for k, e in enumerate(extras)]:
        _check_tensor(t, name, dev, op)
    _check_extras(op, extras, attrs)
    N, C = x.shape[0], x.shape[1]
    S = 1
    for s in x.shape[2:]:
        S *= s
    lib = load()
    stream = stream or torch.cuda.current_stream(dev)
    with torch.cuda.device(dev), torch.cuda.stream(stream):
        (gamma_, beta_, *extras_), pdt = _params(op, C, [("gamma", gamma), ("beta", beta)] +
                                                 [(f"extra {k}", e) for k, e in enumerate(extras)])
        y = _check_out(op, out, catalog.output_shape(op, tuple(x.shape), attrs), x.dtype, dev)
        if x.numel() == 0:
            return y
        d = groupnorm_desc(attrs, N, C, S, x.dtype, pdt)
        ws_bytes = lib.fusedops_groupnorm_act_workspace_size(byref(d))
        ws = _alloc(ws_bytes, torch.uint8, dev) if ws_bytes else None
        err = ctypes.create_string_buffer(512)
        ex = _ptr_array(extras_)
        ws_ptr = ws.data_ptr() if ws is not None else None
        rc = lib.fusedops_groupnorm_act_cuda(byref(d), x.data_ptr(), gamma_.data_ptr(), beta_.data_ptr(), ex,
                                             len(extras_), y.data_ptr(), ws_ptr, ws_bytes, stream.cuda_stream, err,
                                             len(err))
    if rc != OK:
        _raise("fusedops_groupnorm_act_cuda", rc, err)
    return y


def gemm_groupnorm_act_cuda(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, gamma: torch.Tensor,
                            beta: torch.Tensor, extras: Sequence[torch.Tensor], attrs: catalog.FusedAttrs,
                            allow_tf32: int, out: torch.Tensor | None = None,
                            stream: torch.cuda.Stream | None = None) -> torch.Tensor:
    """GemmGroupNormAct on CUDA: Y = reduce_C(post(GroupNorm(pre(X @ W^T + b)))), every row of X one sample.

    X is (..., K); W is (C, K) when attrs.trans_b == 1, (K, C) when 0; b may be None. ``allow_tf32`` (float32 X only):
    1 = TF32 tensor cores, 0 = strict FP32. Returns ``out`` of shape (..., C) or (..., 1) with a reduction.
    """
    op = "GemmGroupNormAct"
    _check_tensor(x, "X", None, op)
    if x.device.type != "cuda":
        raise FusedopsError(f"{op}: X must be a CUDA tensor, got device {x.device}")
    if x.dim() < 2:
        raise FusedopsError(f"{op}: X must have rank >= 2 (rows, K), got shape {tuple(x.shape)}")
    _dtype_code(x.dtype, f"{op}: X")
    dev = x.device
    _check_tensor(w, "W", dev, op)
    if w.dim() != 2:
        raise FusedopsError(f"{op}: W must be 2-D, got shape {tuple(w.shape)}")
    K = x.shape[-1]
    wk, C = (w.shape[1], w.shape[0]) if attrs.trans_b else (w.shape[0], w.shape[1])
    if wk != K:
        raise FusedopsError(f"{op}: X has K={K} features but W of shape {tuple(w.shape)} (trans_b={attrs.trans_b}) "
                            f"expects {wk}")
    named = [("gamma", gamma), ("beta", beta)] + [(f"extra {k}", e) for k, e in enumerate(extras)]
    if b is not None:
        named.append(("bias B", b))
    for name, t in named:
        _check_tensor(t, name, dev, op)
    _check_extras(op, extras, attrs)
    M = x.numel() // K if K else 0
    lib = load()
    stream = stream or torch.cuda.current_stream(dev)
    with torch.cuda.device(dev), torch.cuda.stream(stream):
        params, pdt = _params(op, C, named)
        gamma_, beta_ = params[0], params[1]
        extras_ = params[2:2 + len(extras)]
        b_ = params[-1] if b is not None else None
        w_ = w if w.dtype == x.dtype else w.to(x.dtype)
        y = _check_out(op, out, catalog.output_shape(op, tuple(x.shape), attrs, tuple(w.shape)), x.dtype, dev)
        if M == 0:
            return y
        d = gemm_desc(attrs, M, C, K, x.dtype, pdt, allow_tf32)
        ws_bytes = lib.fusedops_gemm_groupnorm_act_workspace_size(byref(d))
        ws = _alloc(ws_bytes, torch.uint8, dev) if ws_bytes else None
        err = ctypes.create_string_buffer(512)
        ex = _ptr_array(extras_)
        ws_ptr = ws.data_ptr() if ws is not None else None
        rc = lib.fusedops_gemm_groupnorm_act_cuda(byref(d), x.data_ptr(), w_.data_ptr(),
                                                  b_.data_ptr() if b_ is not None else None, gamma_.data_ptr(),
                                                  beta_.data_ptr(), ex, len(extras_), y.data_ptr(), ws_ptr, ws_bytes,
                                                  stream.cuda_stream, err, len(err))
    if rc != OK:
        _raise("fusedops_gemm_groupnorm_act_cuda", rc, err)
    return y


# ---------------------------------------------------------------------------------------------------------------------
# CPU entries (host tensors; the core's multithreaded kernels)
# ---------------------------------------------------------------------------------------------------------------------

def groupnorm_act_cpu(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, extras: Sequence[torch.Tensor],
                      attrs: catalog.FusedAttrs, out: torch.Tensor | None = None) -> torch.Tensor:
    op = "GroupNormAct"
    cpu = torch.device("cpu")
    _check_tensor(x, "X", cpu, op)
    if not 2 <= x.dim() <= 5:
        raise FusedopsError(f"{op}: X must have rank 2-5 (N, C, *spatial), got shape {tuple(x.shape)}")
    _check_extras(op, extras, attrs)
    N, C = x.shape[0], x.shape[1]
    S = 1
    for s in x.shape[2:]:
        S *= s
    (gamma_, beta_, *extras_), pdt = _params(op, C, [("gamma", gamma), ("beta", beta)] +
                                             [(f"extra {k}", e) for k, e in enumerate(extras)])
    y = _check_out(op, out, catalog.output_shape(op, tuple(x.shape), attrs), x.dtype, cpu)
    if x.numel() == 0:
        return y
    d = groupnorm_desc(attrs, N, C, S, x.dtype, pdt)
    err = ctypes.create_string_buffer(512)
    rc = load().fusedops_groupnorm_act_cpu(byref(d), x.data_ptr(), gamma_.data_ptr(), beta_.data_ptr(),
                                           _ptr_array(extras_), len(extras_), y.data_ptr(), err, len(err))
    if rc != OK:
        _raise("fusedops_groupnorm_act_cpu", rc, err)
    return y


def gemm_groupnorm_act_cpu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, gamma: torch.Tensor,
                           beta: torch.Tensor, extras: Sequence[torch.Tensor], attrs: catalog.FusedAttrs,
                           out: torch.Tensor | None = None) -> torch.Tensor:
    op = "GemmGroupNormAct"
    cpu = torch.device("cpu")
    _check_tensor(x, "X", cpu, op)
    _check_tensor(w, "W", cpu, op)
    if x.dim() < 2 or w.dim() != 2:
        raise FusedopsError(f"{op}: X must have rank >= 2 and W rank 2, got {tuple(x.shape)} and {tuple(w.shape)}")
    K = x.shape[-1]
    wk, C = (w.shape[1], w.shape[0]) if attrs.trans_b else (w.shape[0], w.shape[1])
    if wk != K:
        raise FusedopsError(f"{op}: X has K={K} features but W of shape {tuple(w.shape)} expects {wk}")
    _check_extras(op, extras, attrs)
    named = [("gamma", gamma), ("beta", beta)] + [(f"extra {k}", e) for k, e in enumerate(extras)]
    if b is not None:
        named.append(("bias B", b))
    params, pdt = _params(op, C, named)
    extras_ = params[2:2 + len(extras)]
    b_ = params[-1] if b is not None else None
    w_ = w if w.dtype == x.dtype else w.to(x.dtype).contiguous()
    y = _check_out(op, out, catalog.output_shape(op, tuple(x.shape), attrs, tuple(w.shape)), x.dtype, cpu)
    M = x.numel() // K if K else 0
    if M == 0:
        return y
    d = gemm_desc(attrs, M, C, K, x.dtype, pdt, attrs.allow_tf32)
    err = ctypes.create_string_buffer(512)
    rc = load().fusedops_gemm_groupnorm_act_cpu(byref(d), x.data_ptr(), w_.data_ptr(),
                                                b_.data_ptr() if b_ is not None else None, params[0].data_ptr(),
                                                params[1].data_ptr(), _ptr_array(extras_), len(extras_),
                                                y.data_ptr(), err, len(err))
    if rc != OK:
        _raise("gemm_groupnorm_act_cpu", rc, err)
    return y
