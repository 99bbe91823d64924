"""ctypes binding of the fusedops C ABI (``plugins/include/fusedops/fusedops.h``), for tests, tools and the PyTorch
ops' fake kernel. The PyTorch ops themselves do not come through here: they run in C++ (``plugins/torch``).

    load(), has_cuda(), version(), parse_chain(text)           the library and its chain parser
    parse_attributes(op, attrs) -> OpDesc                        attributes parsed and validated (FusedAttrs in)
    describe(desc, inputs) -> (OpDesc, output shape)             the ops' shape/dtype rules; None dims = unknown
    Plan(desc, device, options)                                  a plan: .workspace, .kernels, .run(...)
    PlanOptions(...)                                             kernel variants for A/B timing and tests
    gemm_kernel_choice(desc, device, options) -> (kernel, why)   the planner's GEMM rule (cuBLASLt or CUTLASS)
    groupnorm_act_cuda / gemm_groupnorm_act_cuda / *_cpu(...)    one call through a fresh plan (tests, tools)
    set_cpu_blas(path), cpu_blas()                               the CPU GEMM's BLAS (plugins/cpu_blas.py's choice
                                                                 is applied when the library is loaded)

Errors in what the caller gives raise FusedopsError with the library's message; CUDA failures raise RuntimeError.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, byref, c_char_p, c_float, c_int32, c_int64, c_size_t, c_void_p
from dataclasses import dataclass
from typing import Sequence

import torch

from fusedops import catalog
from fusedops.errors import FusedopsError

from . import cpu_blas as _cpu_blas
from . import native

MAX_STEPS = 16
MAX_EXTRAS = 8
MAX_RANK = 8
DEVICE_CPU = -1
DTYPE_UNKNOWN = -1

OK, ERR_INVALID_ARGUMENT, ERR_UNSUPPORTED, ERR_WORKSPACE, ERR_CUDA, ERR_NOT_BUILT = range(6)
STATUS_NAMES = {0: "ok", 1: "invalid argument", 2: "unsupported", 3: "workspace too small", 4: "CUDA error",
                5: "not built"}
F32, F16, BF16 = 0, 1, 2
DTYPE_CODES = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}
OP_CODES = {name: o.code for name, o in catalog.OPS.items()}  # fusedops_op
CONVTRANSPOSE_GROUP_NORM_ACT = catalog.CONVTRANSPOSE_GROUP_NORM_ACT.name
# fusedops_conv_attributes' lists, in the struct's order (the op's INTS attributes in the spec)
CONV_LISTS = tuple(a.name for a in catalog.CONVTRANSPOSE_GROUP_NORM_ACT.attrs if a.type == "INTS")
GEMM_AUTO, GEMM_CUBLASLT, GEMM_CUTLASS, GEMM_SKINNY = 0, 1, 2, 3  # fusedops_gemm_kernel
CONVT_AUTO, CONVT_IGEMM, CONVT_WGMMA = 0, 1, 2  # fusedops_convt_kernel


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


class ConvDesc(ctypes.Structure):
    """fusedops_conv_desc: ConvTransposeGroupNormAct's transposed convolution (zero for the other ops)."""
    _fields_ = [("spatial_rank", c_int32), ("group", c_int32), ("in_channels", c_int64), ("input", c_int64 * 3),
                ("output", c_int64 * 3), ("kernel", c_int32 * 3), ("strides", c_int32 * 3),
                ("pads_begin", c_int32 * 3), ("pads_end", c_int32 * 3), ("output_padding", c_int32 * 3),
                ("dilations", c_int32 * 3), ("channels_last", c_int32)]


class OpDesc(ctypes.Structure):
    _fields_ = [("op", c_int32), ("d", GemmDesc), ("conv", ConvDesc)]


class ConvAttributes(ctypes.Structure):
    """fusedops_conv_attributes: ConvTranspose's INTS attributes (pointer + length each; empty = ONNX's default)."""
    _fields_ = [("kernel_shape", POINTER(c_int64)), ("num_kernel_shape", c_int32),
                ("strides", POINTER(c_int64)), ("num_strides", c_int32),
                ("pads", POINTER(c_int64)), ("num_pads", c_int32),
                ("output_padding", POINTER(c_int64)), ("num_output_padding", c_int32),
                ("dilations", POINTER(c_int64)), ("num_dilations", c_int32),
                ("group", c_int64)]


class Attributes(ctypes.Structure):
    _fields_ = [("op", c_int32), ("num_groups", c_int64), ("epsilon", c_float), ("pre", c_char_p),
                ("post", c_char_p), ("reduce", c_char_p), ("trans_b", c_int32), ("allow_tf32", c_int32),
                ("conv", POINTER(ConvAttributes))]


class TensorDesc(ctypes.Structure):
    _fields_ = [("dtype", c_int32), ("rank", c_int32), ("dims", c_int64 * MAX_RANK)]


@dataclass(frozen=True)
class PlanOptions:
    """Kernel variants kept for A/B timing (fusedops_plan_options); the defaults are what production plans run."""

    gelu_erff: bool = False          # GELU through erff instead of the polynomial + ex2 form
    groupnorm_two_pass: bool = False  # never the one-pass kernel for large groups
    epilogue_register: bool = False   # the one-row register epilogue instead of the column-slice one
    epilogue_rows: int = 0            # rows a column-slice epilogue block walks (0: planner's choice)
    lt_workspace_mib: int = 0         # cuBLASLt workspace cap (0: 4 MiB)
    l2_wave_fraction: float = 0.0     # two-pass GroupNorm in waves of this fraction of L2 (0: one launch)
    gemm_kernel: int = GEMM_AUTO      # GemmGroupNormAct: GEMM_CUBLASLT, GEMM_CUTLASS or GEMM_SKINNY forces one (0: planner)
    fp32_gemm: int = 0                # float32 with allow_tf32=0: 1 strict FP32 (cuBLASLt), 2 3xTF32 (0: planner)
    cutlass_config: int = 0           # k > 0: the k-th CUTLASS tile configuration (0: default)
    reduce_whole_row: bool = False    # a channel reduction of rows in one block per row (no cluster of slices)
    direct_launches: bool = False     # GemmGroupNormAct: launch each call, no CUDA graph replay per pointer set
    convt_kernel: int = CONVT_AUTO    # ConvTransposeGroupNormAct: CONVT_IGEMM or CONVT_WGMMA forces one (0: planner)
    convt_blocks: int = 0             # wgmma convolution: k > 0 caps its persistent grid at k blocks (0: one an SM)
    convt_ring_producer: bool = False  # wgmma convolution: float32 X staged through a cp.async ring (A/B; slower)
    convt_normalisers: int = 0        # wgmma convolution: k > 0 blocks normalise behind it (A/B; slower)


class _Options(ctypes.Structure):
    _fields_ = [("gelu_erff", c_int32), ("groupnorm_two_pass", c_int32), ("epilogue_register", c_int32),
                ("epilogue_rows", c_int32), ("lt_workspace_mib", c_int32), ("l2_wave_fraction", c_float),
                ("gemm_kernel", c_int32), ("fp32_gemm", c_int32), ("cutlass_config", c_int32),
                ("reduce_whole_row", c_int32), ("direct_launches", c_int32),
                ("convt_kernel", c_int32), ("convt_blocks", c_int32), ("convt_ring_producer", c_int32),
                ("convt_normalisers", c_int32)]

    @classmethod
    def of(cls, o: PlanOptions) -> "_Options":
        return cls(int(o.gelu_erff), int(o.groupnorm_two_pass), int(o.epilogue_register), int(o.epilogue_rows),
                   int(o.lt_workspace_mib), float(o.l2_wave_fraction), int(o.gemm_kernel), int(o.fp32_gemm),
                   int(o.cutlass_config), int(o.reduce_whole_row), int(o.direct_launches), int(o.convt_kernel),
                   int(o.convt_blocks), int(o.convt_ring_producer), int(o.convt_normalisers))


class GemmDevice(ctypes.Structure):
    """fusedops_gemm_device: what the GEMM choice depends on."""
    _fields_ = [("cc_major", c_int32), ("cc_minor", c_int32), ("sm_count", c_int32), ("has_cutlass", c_int32)]


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
                raise FusedopsError(native.missing_library(
                    "libfusedops.so", "build it with `fusedops build-native` (or set FUSEDOPS_BUILD_DIR)"))
            lib = ctypes.CDLL(str(path))
            _declare(lib)
            choice = _cpu_blas.default_choice()
            if choice:
                _set_cpu_blas(lib, choice)
            _lib = lib
    return _lib


def _declare(lib: ctypes.CDLL) -> None:
    gn, gm, od = POINTER(GroupNormDesc), POINTER(GemmDesc), POINTER(OpDesc)
    pp = POINTER(c_void_p)
    sig = {
        "fusedops_parse_chain": (ctypes.c_int, [c_char_p, POINTER(Chain), c_char_p, c_size_t]),
        "fusedops_parse_reduce": (ctypes.c_int, [c_char_p, POINTER(c_int32), c_char_p, c_size_t]),
        "fusedops_num_extras": (c_int32, [POINTER(Chain), POINTER(Chain)]),
        "fusedops_parse_attributes": (ctypes.c_int, [POINTER(Attributes), od, c_char_p, c_size_t]),
        "fusedops_describe": (ctypes.c_int, [od, POINTER(TensorDesc), c_int32, POINTER(TensorDesc), c_char_p,
                                             c_size_t]),
        "fusedops_plan_create": (ctypes.c_int, [od, c_int32, POINTER(_Options), POINTER(c_void_p), c_char_p,
                                                c_size_t]),
        "fusedops_plan_destroy": (None, [c_void_p]),
        "fusedops_plan_workspace_size": (c_size_t, [c_void_p]),
        "fusedops_plan_kernels": (c_char_p, [c_void_p]),
        "fusedops_plan_run": (ctypes.c_int, [c_void_p, pp, c_int32, c_void_p, c_void_p, c_size_t, c_void_p,
                                             c_char_p, c_size_t]),
        "fusedops_plan_prepared_weights_size": (c_size_t, [c_void_p]),
        "fusedops_plan_prepare_weights": (ctypes.c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_void_p,
                                                         c_char_p, c_size_t]),
        "fusedops_plan_run_prepared": (ctypes.c_int, [c_void_p, pp, c_int32, c_void_p, c_void_p, c_void_p, c_size_t,
                                                      c_void_p, c_char_p, c_size_t]),
        "fusedops_workspace_size": (c_size_t, [od]),
        "fusedops_groupnorm_act_check": (ctypes.c_int, [gn, c_char_p, c_size_t]),
        "fusedops_gemm_groupnorm_act_check": (ctypes.c_int, [gm, c_char_p, c_size_t]),
        "fusedops_groupnorm_act_cpu": (ctypes.c_int, [gn, c_void_p, c_void_p, c_void_p, pp, c_int32, c_void_p,
                                                      c_char_p, c_size_t]),
        "fusedops_gemm_groupnorm_act_cpu": (ctypes.c_int, [gm, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, pp,
                                                           c_int32, c_void_p, c_char_p, c_size_t]),
        "fusedops_has_cuda": (ctypes.c_int, []),
        "fusedops_has_cutlass": (ctypes.c_int, []),
        "fusedops_gemm_kernel_choice": (ctypes.c_int, [od, POINTER(GemmDevice), POINTER(_Options), POINTER(c_int32),
                                                       c_char_p, c_size_t]),
        "fusedops_version": (c_char_p, []),
        "fusedops_set_cpu_blas": (ctypes.c_int, [c_char_p, c_char_p, c_size_t]),
        "fusedops_cpu_blas": (c_char_p, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def has_cuda() -> bool:
    """True if the built library has the CUDA entries (False when built without nvcc/cuBLASLt)."""
    return bool(load().fusedops_has_cuda())


def has_cutlass() -> bool:
    """True if the built library has the CUTLASS sm_90 kernels (GroupNorm inside the GEMM)."""
    return bool(load().fusedops_has_cutlass())


def version() -> str:
    return load().fusedops_version().decode()


def _set_cpu_blas(lib: ctypes.CDLL, path: str | None) -> None:
    err = _err()
    rc = lib.fusedops_set_cpu_blas(None if path is None else os.fsencode(path), err, len(err))
    if rc:
        _raise("fusedops_set_cpu_blas", rc, err)


def set_cpu_blas(path: str | None) -> str:
    """Choose the CPU GEMM's BLAS: a library path or soname, "eigen", or None (search the system's); returns
    what the CPU GEMM uses now. FusedopsError naming the path when it does not load or lacks cblas_sgemm."""
    lib = load()
    _set_cpu_blas(lib, path)
    return cpu_blas()


def cpu_blas() -> str:
    """What the CPU GEMM uses, in words (e.g. "OpenBLAS (...) from PATH" or "Eigen 3 GEMM (built in)")."""
    return load().fusedops_cpu_blas().decode(errors="replace")


def _raise(fn: str, rc: int, err: ctypes.Array) -> None:
    msg = err.value.decode(errors="replace") or STATUS_NAMES.get(rc, f"status {rc}")
    text = f"{fn}: {msg}"
    if rc == ERR_CUDA:
        raise RuntimeError(text)
    raise FusedopsError(text)


def _err() -> ctypes.Array:
    return ctypes.create_string_buffer(1024)


# ---------------------------------------------------------------------------------------------------------------------
# Attributes and shape rules
# ---------------------------------------------------------------------------------------------------------------------

def parse_chain(text: str) -> Chain:
    """Parse chain text with the native parser (FusedopsError naming the problem)."""
    ch, err = Chain(), _err()
    rc = load().fusedops_parse_chain(text.encode(), byref(ch), err, len(err))
    if rc != OK:
        _raise("fusedops_parse_chain", rc, err)
    return ch


def parse_attributes(op: str, attrs: catalog.FusedAttrs, conv: dict | None = None) -> OpDesc:
    """The node's attributes through the library's parser (shapes and dtypes of the result unknown: -1).
    ConvTransposeGroupNormAct also takes ``conv``: ONNX ConvTranspose's attributes (kernel_shape, strides, pads as
    begins then ends, output_padding, dilations: lists, absent = ONNX's default; group: int)."""
    a = Attributes(OP_CODES[op], int(attrs.num_groups), float(attrs.epsilon), catalog.chain_text(attrs.pre).encode(),
                   catalog.chain_text(attrs.post).encode(), attrs.reduce.encode(), int(attrs.trans_b),
                   int(attrs.allow_tf32))
    keep = []  # the lists must outlive the call
    if conv is not None:
        unknown = set(conv) - set(CONV_LISTS) - {"group"}
        if unknown:
            raise FusedopsError(f"{op}: unknown convolution attribute(s) {sorted(unknown)}; known: "
                                f"{', '.join(CONV_LISTS)}, group")
        c = ConvAttributes()
        for name in CONV_LISTS:
            values = list(conv.get(name) or [])
            arr = (c_int64 * max(1, len(values)))(*[int(v) for v in values])
            keep.append(arr)
            setattr(c, name, ctypes.cast(arr, POINTER(c_int64)))
            setattr(c, f"num_{name}", len(values))
        c.group = int(conv.get("group", 1))
        keep.append(c)
        a.conv = ctypes.pointer(c)
    d, err = OpDesc(), _err()
    rc = load().fusedops_parse_attributes(byref(a), byref(d), err, len(err))
    if rc != OK:
        _raise("fusedops_parse_attributes", rc, err)
    return d


def tensor_desc(dtype: torch.dtype | None, shape: Sequence[int | None] | None) -> TensorDesc:
    """dtype None or one the kernels do not take → unknown; shape None → rank unknown; a None dim → unknown."""
    t = TensorDesc()
    t.dtype = DTYPE_CODES.get(dtype, DTYPE_UNKNOWN) if dtype is not None else DTYPE_UNKNOWN
    t.rank = -1 if shape is None else len(shape)
    for i, s in enumerate(shape or ()):
        if i < MAX_RANK:
            t.dims[i] = -1 if s is None else int(s)
    return t


def describe(desc: OpDesc, inputs: Sequence[TensorDesc]) -> tuple[OpDesc, tuple[int | None, ...] | None]:
    """Apply the ops' shape rules (fusedops_describe) to a copy of ``desc``; returns it completed and the output's
    shape (None dims where unknown; None when X's rank is unknown)."""
    d = OpDesc.from_buffer_copy(desc)
    arr = (TensorDesc * max(1, len(inputs)))(*inputs)
    out, err = TensorDesc(), _err()
    rc = load().fusedops_describe(byref(d), arr, len(inputs), byref(out), err, len(err))
    if rc != OK:
        _raise("fusedops_describe", rc, err)
    shape = None if out.rank < 0 else tuple(None if out.dims[i] < 0 else out.dims[i] for i in range(out.rank))
    return d, shape


# ---------------------------------------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------------------------------------

class Plan:
    """A plan of the C ABI for a complete descriptor on ``device`` (a CUDA ordinal, or DEVICE_CPU)."""

    def __init__(self, desc: OpDesc, device: int, options: PlanOptions | None = None):
        self._lib = load()
        self._ptr = c_void_p()
        opts = None
        if options is not None:
            opts = byref(_Options.of(options))
        err = _err()
        rc = self._lib.fusedops_plan_create(byref(desc), int(device), opts, byref(self._ptr), err, len(err))
        if rc != OK:
            _raise("fusedops_plan_create", rc, err)
        self.desc = OpDesc.from_buffer_copy(desc)
        self.device = device
        self.workspace = int(self._lib.fusedops_plan_workspace_size(self._ptr))
        self.kernels = self._lib.fusedops_plan_kernels(self._ptr).decode()
        # bytes of W's prepared form the plan takes (3xTF32 GemmGroupNormAct plans); 0: none
        self.prepared_weights = int(self._lib.fusedops_plan_prepared_weights_size(self._ptr))

    def __del__(self):
        if getattr(self, "_ptr", None) and self._ptr.value:
            self._lib.fusedops_plan_destroy(self._ptr)
            self._ptr = c_void_p()

    def run(self, inputs: Sequence[int | None], y: int, workspace: int | None, workspace_bytes: int,
            stream: int | None = None, prepared: int | None = None) -> None:
        """Run on raw pointers (data_ptr() values; None for an absent bias); ``prepared``: W's prepared form
        (prepare_weights), or None."""
        arr = (c_void_p * max(1, len(inputs)))(*inputs)
        err = _err()
        if prepared is None:
            rc = self._lib.fusedops_plan_run(self._ptr, arr, len(inputs), y, workspace, workspace_bytes, stream, err,
                                             len(err))
        else:
            rc = self._lib.fusedops_plan_run_prepared(self._ptr, arr, len(inputs), prepared, y, workspace,
                                                      workspace_bytes, stream, err, len(err))
        if rc != OK:
            _raise("fusedops_plan_run", rc, err)

    def prepare_weights(self, w: int, prepared: int | None, prepared_bytes: int, stream: int | None = None) -> None:
        """Write W's prepared form (``prepared_weights`` bytes) into the buffer at ``prepared`` (raw pointers)."""
        err = _err()
        rc = self._lib.fusedops_plan_prepare_weights(self._ptr, w, prepared, prepared_bytes, stream, err, len(err))
        if rc != OK:
            _raise("fusedops_plan_prepare_weights", rc, err)


def gemm_kernel_choice(desc: OpDesc, device: GemmDevice, options: PlanOptions | None = None) -> tuple[int, str]:
    """The planner's GEMM rule for a complete GemmGroupNormAct descriptor: (GEMM_CUBLASLT or GEMM_CUTLASS, why).
    FusedopsError when the options force what cannot run on ``device``."""
    kernel, err = c_int32(), _err()
    opts = byref(_Options.of(options)) if options is not None else None
    rc = load().fusedops_gemm_kernel_choice(byref(desc), byref(device), opts, byref(kernel), err, len(err))
    if rc != OK:
        _raise("fusedops_gemm_kernel_choice", rc, err)
    return int(kernel.value), err.value.decode(errors="replace")


def workspace_size(desc: OpDesc) -> int:
    """Bytes a production plan of ``desc`` needs on any device (what a TensorRT engine reserves)."""
    return int(load().fusedops_workspace_size(byref(desc)))


# ---------------------------------------------------------------------------------------------------------------------
# Torch-tensor entries (one fresh plan per call: tests and tools; the PyTorch ops cache theirs in C++)
# ---------------------------------------------------------------------------------------------------------------------

def poisoning() -> bool:
    """FUSEDOPS_POISON_OUTPUTS=1: outputs the entries allocate start as NaN and workspaces as 0xFF bytes, so a test
    sees any element a kernel failed to write, or any workspace byte read before it was written (read once, here,
    by tests and tools; the PyTorch ops take the same switch through torch_ops.set_poison_outputs)."""
    return os.environ.get("FUSEDOPS_POISON_OUTPUTS") == "1"


def _alloc(shape, dtype: torch.dtype, device) -> torch.Tensor:
    if not poisoning():
        return torch.empty(shape, dtype=dtype, device=device)
    shape = (shape,) if isinstance(shape, int) else shape
    return torch.full(shape, 0xFF if dtype == torch.uint8 else float("nan"), dtype=dtype, device=device)


def _run(op: str, tensors: list[torch.Tensor | None], attrs: catalog.FusedAttrs, device: int,
         out: torch.Tensor | None, options: PlanOptions | None, stream) -> torch.Tensor:
    for i, t in enumerate(tensors):
        if t is not None and not isinstance(t, torch.Tensor):
            raise FusedopsError(f"{op}: input {i} must be a torch.Tensor, got {type(t).__name__}")
    x = tensors[0]
    first_param = 2 if op == catalog.GEMM_GROUP_NORM_ACT.name else 1
    params = [t for t in tensors[first_param:] if t is not None]
    # Per-channel inputs in one dtype the kernels take (their own when they agree, float32 otherwise).
    pdts = {t.dtype for t in params}
    if len(pdts) > 1 or (pdts and next(iter(pdts)) not in (torch.float32, x.dtype)):
        tensors = tensors[:first_param] + [t.float() if t is not None else None for t in tensors[first_param:]]
    tensors = [t.contiguous() if t is not None else None for t in tensors]
    descs = [tensor_desc(t.dtype, tuple(t.shape)) if t is not None else tensor_desc(x.dtype, (None,))
             for t in tensors]
    for t, dsc in zip(tensors, descs):
        if t is not None and t.dtype not in DTYPE_CODES:
            raise FusedopsError(f"{op}: a tensor has dtype {t.dtype}; fusedops kernels take float32, float16 or "
                                "bfloat16")
    if op == catalog.GEMM_GROUP_NORM_ACT.name and tensors[2] is None:  # no bias: describe it as C float32 values
        descs[2] = tensor_desc(None, None)
    d, shape = describe(parse_attributes(op, attrs), descs)
    if out is None:
        y = _alloc(shape, x.dtype, x.device)
    else:
        if tuple(out.shape) != tuple(shape) or out.dtype != x.dtype or out.device != x.device:
            raise FusedopsError(f"{op}: out has shape {tuple(out.shape)} and dtype {out.dtype}, expected "
                                f"{tuple(shape)} and {x.dtype} on {x.device}")
        y = out
    plan = Plan(d, device, options)
    if y.numel() == 0:
        return y
    ws = _alloc(plan.workspace, torch.uint8, x.device) if plan.workspace else None
    ptrs = [t.data_ptr() if t is not None else None for t in tensors]
    plan.run(ptrs, y.data_ptr(), ws.data_ptr() if ws is not None else None, plan.workspace, stream)
    return y


def _cuda_run(op, tensors, attrs, out, options, stream) -> torch.Tensor:
    x = tensors[0]
    if not isinstance(x, torch.Tensor) or x.device.type != "cuda":
        raise FusedopsError(f"{op}: X must be a CUDA tensor")
    for t in tensors:
        if t is not None and t.device != x.device:
            raise FusedopsError(f"{op}: all tensors must be on {x.device}, one is on {t.device}")
    stream = stream or torch.cuda.current_stream(x.device)
    with torch.cuda.device(x.device), torch.cuda.stream(stream):
        return _run(op, tensors, attrs, x.device.index, out, options, stream.cuda_stream)


def groupnorm_act_cuda(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, extras: Sequence[torch.Tensor],
                       attrs: catalog.FusedAttrs, out: torch.Tensor | None = None,
                       stream: torch.cuda.Stream | None = None, options: PlanOptions | None = None) -> torch.Tensor:
    """GroupNormAct on CUDA (asynchronous on ``stream``, default the current one)."""
    return _cuda_run(catalog.GROUP_NORM_ACT.name, [x, gamma, beta, *extras], attrs, out, options, stream)


def gemm_groupnorm_act_cuda(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, gamma: torch.Tensor,
                            beta: torch.Tensor, extras: Sequence[torch.Tensor], attrs: catalog.FusedAttrs,
                            allow_tf32: int, out: torch.Tensor | None = None,
                            stream: torch.cuda.Stream | None = None,
                            options: PlanOptions | None = None) -> torch.Tensor:
    """GemmGroupNormAct on CUDA; ``allow_tf32`` (0/1) overrides ``attrs.allow_tf32``; ``b`` may be None."""
    a = catalog.FusedAttrs(**{**attrs.__dict__, "allow_tf32": int(bool(allow_tf32))})
    return _cuda_run(catalog.GEMM_GROUP_NORM_ACT.name, [x, w, b, gamma, beta, *extras], a, out, options, stream)


def _cpu_run(op, tensors, attrs, out) -> torch.Tensor:
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            raise FusedopsError(f"{op}: every tensor must be on the CPU, one is on {t.device}")
    return _run(op, tensors, attrs, DEVICE_CPU, out, None, None)


def groupnorm_act_cpu(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, extras: Sequence[torch.Tensor],
                      attrs: catalog.FusedAttrs, out: torch.Tensor | None = None) -> torch.Tensor:
    return _cpu_run(catalog.GROUP_NORM_ACT.name, [x, gamma, beta, *extras], attrs, out)


def gemm_groupnorm_act_cpu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, gamma: torch.Tensor,
                           beta: torch.Tensor, extras: Sequence[torch.Tensor], attrs: catalog.FusedAttrs,
                           out: torch.Tensor | None = None) -> torch.Tensor:
    return _cpu_run(catalog.GEMM_GROUP_NORM_ACT.name, [x, w, b, gamma, beta, *extras], attrs, out)
