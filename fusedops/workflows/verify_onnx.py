"""``fusedops verify PATH.onnx``: any ONNX model, fused by the fusedops library against the same model unfused.

- An unfused model (no node in domain ``fusedops``) is fused into a temporary folder; the fused file runs on ONNX
  Runtime with the fusedops library and the original on plain ONNX Runtime (CPU EP).
- A fused model runs on the library and, as its own reference, on plain ONNX Runtime, where every fused node runs
  the standard-ONNX function body it carries ("unfused" means: the function bodies).
- ``torch_module`` (``MODULE:CALLABLE`` or a ``torch.nn.Module``): the module in float32 on the CPU on the same inputs
  is a second reference for the fused model.

Inputs are fresh random normals (never zeros) from a fixed seed, one per floating graph input. The user's files are
only read; everything written goes to a temporary folder that is removed.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

from .. import ort as fo_ort
from ..catalog import quote
from ..errors import FusedopsError, UsageError
from ..exporter_api import fuse_file
from ..input_files import load_onnx_with_inputs
from ..trt_build.profile import InputInfo, onnx_inputs, parse_shapes_arg
from .names import ONNX_BACKENDS

DOMAIN = "fusedops"
DEFAULT_BATCH = 2
# Default tolerances: float32 on the CPU is compared strictly; 16-bit models and the CUDA EP (TF32 GEMMs) loosely.
STRICT_TOLERANCE = 1e-4
LOOSE_TOLERANCE = 1e-2
_TYPE_NAMES = {"float": "float32"}  # ONNX's name for float32
_PROVIDERS = {"ort-cpu": "CPUExecutionProvider", "ort-cuda": "CUDAExecutionProvider"}
_FLOAT_TYPES = {"float": np.float32, "float16": np.float16, "bfloat16": np.float32}  # bfloat16: _bfloat16_values


@dataclass
class OutputCheck:
    """One output of one comparison."""

    name: str
    shape: tuple[int, ...] | None  # the candidate's shape (None: the candidate had no such output)
    max_abs_err: float | None
    allclose: bool
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.allclose


@dataclass
class Comparison:
    """The fused model on the library (candidate) against one reference, output by output."""

    candidate: str
    reference: str
    outputs: list[OutputCheck]
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.note and bool(self.outputs) and all(o.ok for o in self.outputs)


@dataclass
class OnnxVerifyResult:
    """What ``fusedops.verify("model.onnx", ...)`` found. ``ok``: every comparison passed."""

    model: str
    backend: str
    fused_nodes: int  # fusedops nodes in the model that ran on the library
    fused_here: bool  # True: the input had none and verify fused it (into a temporary folder)
    inputs: dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, ONNX type name)
    seed: int
    atol: float
    rtol: float
    library_kernel_calls: int  # how often the library's kernels ran for the candidate
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.comparisons) and all(c.ok for c in self.comparisons)

    @property
    def nothing_fused(self) -> bool:
        return self.fused_nodes == 0


# ---- arguments -------------------------------------------------------------------------------------------------------

def _check_arguments(backend, batch, seed) -> None:
    if not isinstance(backend, str) or backend not in ONNX_BACKENDS:
        raise UsageError(f"an ONNX file is verified on {' or '.join(ONNX_BACKENDS)}, got backend {backend!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise UsageError(f"batch must be a positive integer (or None for {DEFAULT_BATCH}), got {batch!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed must be a non-negative integer, got {seed!r}")


def _tolerance(name: str, value, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise UsageError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def _shapes(shapes) -> dict[str, tuple[int, ...]]:
    """``name:1x3x32x32,...`` (trtexec syntax) or a {name: shape} mapping."""
    if shapes is None:
        return {}
    if isinstance(shapes, str):
        try:
            return parse_shapes_arg(shapes)
        except FusedopsError as e:
            raise UsageError(f"shapes: {e}") from None
    if isinstance(shapes, dict):
        out = {}
        for name, shape in shapes.items():
            if not (isinstance(shape, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool)
                                                              and d > 0 for d in shape)):
                raise UsageError(f"shapes: {name!r} must map to positive integer dimensions, got {shape!r}")
            out[str(name)] = tuple(shape)
        return out
    raise UsageError(f"shapes must be 'name:1x3x32x32,...' or a dict of shapes, got {type(shapes).__name__}")


# ---- inputs ----------------------------------------------------------------------------------------------------------

def _input_shape(inp: InputInfo, batch: int, given: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The input's shape: static dims kept, dim 0 from ``batch``, other symbolic dims from ``given`` (``--shapes``)."""
    if inp.name in given:
        shape = given[inp.name]
        if len(shape) != len(inp.dims):
            raise UsageError(f"--shapes gives input {inp.name!r} rank {len(shape)}; the model's input has rank "
                             f"{len(inp.dims)} ({_dims_text(inp.dims)})")
        for k, (d, v) in enumerate(zip(inp.dims, shape)):
            if isinstance(d, int) and d != v:
                raise UsageError(f"--shapes gives input {inp.name!r} dimension {k} = {v}; the model fixes it at {d}")
        return tuple(shape)
    shape = []
    for k, d in enumerate(inp.dims):
        if isinstance(d, int):
            shape.append(d)
        elif k == 0:
            shape.append(batch)
        else:
            raise UsageError(f"input {inp.name!r} dimension {k} ({d or 'unnamed'}) is symbolic and has no value; "
                             f"give the input's shape with --shapes {inp.name}:{_example(inp.dims, batch)}")
    return tuple(shape)


def _dims_text(dims) -> str:
    return "x".join(str(d) if d is not None else "?" for d in dims) or "scalar"


def _example(dims, batch: int) -> str:
    return "x".join(str(d) if isinstance(d, int) else (str(batch) if k == 0 else "D") for k, d in enumerate(dims))


def random_inputs(model: onnx.ModelProto, batch: int, shapes: dict[str, tuple[int, ...]],
                  seed: int) -> tuple[list[InputInfo], list[np.ndarray]]:
    """Standard-normal values (never zeros) for every graph input, in graph order: float32, float16, or for bfloat16
    float32 arrays of bfloat16 values (fed as bfloat16, _ort_value); UsageError naming an input that is not floating."""
    infos = onnx_inputs(model)
    unknown = sorted(set(shapes) - {i.name for i in infos})
    if unknown:
        raise UsageError(f"--shapes names unknown input(s) {', '.join(unknown)}; the model's inputs are "
                         f"{', '.join(i.name for i in infos) or 'none'}")
    rng = np.random.default_rng(seed)
    arrays = []
    for inp in infos:
        if inp.elem_type not in _FLOAT_TYPES:
            raise UsageError(f"input {inp.name!r} is {inp.elem_type}; verify makes random inputs for float32, float16 "
                             f"and bfloat16 inputs only")
        shape = _input_shape(inp, batch, shapes)
        values = rng.standard_normal(shape).astype(_FLOAT_TYPES[inp.elem_type])
        arrays.append(_bfloat16_values(values) if inp.elem_type == "bfloat16" else values)
    return infos, arrays


def _bfloat16_values(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), so every runtime sees the same numbers."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def _ort_value(info: InputInfo, array: np.ndarray):
    """A feed value: the array, or for bfloat16 an OrtValue of its upper 16 bits (numpy has no bfloat16)."""
    if info.elem_type != "bfloat16":
        return array
    bits = (np.ascontiguousarray(array, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)


# ---- running ---------------------------------------------------------------------------------------------------------

def count_fused_nodes(model: onnx.ModelProto) -> int:
    return sum(1 for n in model.graph.node if n.domain == DOMAIN)


def _run(sess, infos: list[InputInfo], arrays: list[np.ndarray], what: str) -> list[np.ndarray]:
    feed = {i.name: _ort_value(i, a) for i, a in zip(infos, arrays)}
    try:
        return [np.asarray(v) for v in sess.run(None, feed)]
    except Exception as e:  # onnxruntime's own exception types; its message names the node
        raise FusedopsError(f"{what} failed: {_first_line(e)}") from None


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _plain_session(path: Path):
    try:
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:
        raise FusedopsError(f"plain onnxruntime cannot load {quote(str(path), limit=200)}: {_first_line(e)}") \
            from None


def _library_session(path: Path, backend: str):
    provider = _PROVIDERS[backend]
    reason = fo_ort.unavailable_reason(provider)
    if reason is None and provider not in ort.get_available_providers():
        reason = f"{provider} is not in this onnxruntime build"
    if reason:
        raise FusedopsError(f"backend {backend} cannot run here: {reason}")
    return fo_ort.session(str(path), providers=list(dict.fromkeys([provider, "CPUExecutionProvider"])))


# ---- comparing -------------------------------------------------------------------------------------------------------

def compare_outputs(names: list[str], got: list[np.ndarray], want: list[np.ndarray], atol: float,
                    rtol: float) -> list[OutputCheck]:
    """float64 comparison per output; NaN matches only NaN at the same place."""
    checks = []
    for k, name in enumerate(names):
        if k >= len(got) or k >= len(want):
            checks.append(OutputCheck(name, None if k >= len(got) else got[k].shape, None, False,
                                      "missing from the " + ("candidate" if k >= len(got) else "reference")))
            continue
        g, w = np.asarray(got[k], dtype=np.float64), np.asarray(want[k], dtype=np.float64)
        if g.shape != w.shape:
            checks.append(OutputCheck(name, g.shape, None, False, f"shape {g.shape} != reference {w.shape}"))
            continue
        g_nan, w_nan = np.isnan(g), np.isnan(w)
        both = ~(g_nan | w_nan)
        err = float(np.abs(g - w)[both].max()) if both.any() else 0.0
        ok = bool(np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True))
        if (g_nan != w_nan).any():
            note = f"NaN in the {'candidate' if (g_nan & ~w_nan).any() else 'reference'} only"
        else:
            note = f"{int(g_nan.sum())} NaN in both" if g_nan.any() else ""
        checks.append(OutputCheck(name, g.shape, err, ok, note))
    return checks


# ---- PyTorch reference -----------------------------------------------------------------------------------------------

def load_torch_module(spec):
    """``MODULE:CALLABLE`` (MODULE importable from the current folder or PYTHONPATH; CALLABLE() returns a
    torch.nn.Module) or a torch.nn.Module; UsageError naming what is wrong."""
    if isinstance(spec, torch.nn.Module):
        return spec
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise UsageError(f"--torch must be MODULE:CALLABLE (e.g. mymodels:build), got {spec!r}")
    module_name, attr = spec.split(":")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:  # the console script's sys.path lacks the current folder; `python -m` has it
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the user's module: ImportError or whatever its import raised
        raise UsageError(f"--torch: cannot import module {module_name!r} ({_first_line(e)})") from None
    finally:
        if added:
            sys.path.remove(cwd)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"--torch: module {module_name!r} has no callable {attr!r}")
    try:
        built = fn()
    except Exception as e:
        raise UsageError(f"--torch: {spec}() raised {_first_line(e)}") from None
    if not isinstance(built, torch.nn.Module):
        raise UsageError(f"--torch: {spec}() returned {type(built).__name__}, not a torch.nn.Module")
    return built


def run_torch(module, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The module in float32 on the CPU, inputs in graph-input order; outputs a tensor or a tuple / list of them."""
    module = module.float().cpu().eval()
    xs = [torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in arrays]
    try:
        with torch.no_grad():
            out = module(*xs)
    except Exception as e:
        raise FusedopsError(f"--torch: the module failed on the model's inputs: {_first_line(e)}") from None
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not all(isinstance(t, torch.Tensor) for t in outs):
        raise FusedopsError(f"--torch: the module returned {type(out).__name__}; expected a tensor or a tuple of them")
    return [t.detach().double().numpy() for t in outs]


# ---- the workflow ----------------------------------------------------------------------------------------------------

def verify_onnx(path, backend: str = "ort-cpu", atol: float | None = None, rtol: float | None = None,
                batch: int | None = None, shapes=None, seed: int = 0, torch_module=None) -> OnnxVerifyResult:
    """Compare the fused form of the ONNX file ``path`` on the fusedops library (``backend`` ort-cpu / ort-cuda)
    with the model unfused on plain ONNX Runtime's CPU EP, and with ``torch_module`` when given. Default
    tolerances: 1e-4 for float32 on ort-cpu, 1e-2 for float16 / bfloat16 models or on ort-cuda (TF32)."""
    _check_arguments(backend, batch, seed)
    given = _shapes(shapes)
    src = Path(os.fspath(path)).expanduser()
    model, _files = load_onnx_with_inputs(src, load_external=False)
    infos, arrays = random_inputs(model, batch or DEFAULT_BATCH, given, seed)
    sixteen_bit = any(i.elem_type != "float" for i in infos) or any(
        o.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
        for o in model.graph.output)
    default_tol = LOOSE_TOLERANCE if sixteen_bit or backend == "ort-cuda" else STRICT_TOLERANCE
    atol, rtol = _tolerance("atol", atol, default_tol), _tolerance("rtol", rtol, default_tol)
    torch_ref = load_torch_module(torch_module) if torch_module is not None else None
    output_names = [o.name for o in model.graph.output]
    fused_nodes = count_fused_nodes(model)
    fused_here = fused_nodes == 0
    with tempfile.TemporaryDirectory(prefix="fusedops-verify-") as tmp:
        if fused_here:
            fused_path = fuse_file(src, Path(tmp) / "fused.onnx").path
            fused_nodes = count_fused_nodes(onnx.load(str(fused_path), load_external_data=False))
            reference_label = "the input model on plain onnxruntime (CPU)"
        else:
            fused_path = src  # only read: sessions load it, nothing writes
            reference_label = "the same model on plain onnxruntime (CPU): fused nodes run their function bodies"
        reference = _run(_plain_session(src), infos, arrays, "the unfused reference on plain onnxruntime")
        library = _library_session(fused_path, backend)
        calls_before = fo_ort.kernel_calls()
        candidate = _run(library, infos, arrays, f"the fused model on the fusedops library ({backend})")
        calls = fo_ort.kernel_calls() - calls_before
    label = f"fused model, fusedops library ({backend})"
    note = ""
    if fused_nodes and not calls:
        note = "the library's kernels did not run: the comparison would prove nothing"
    shown = {i.name: (a.shape, _TYPE_NAMES.get(i.elem_type, i.elem_type)) for i, a in zip(infos, arrays)}
    result = OnnxVerifyResult(str(path), backend, fused_nodes, fused_here, shown, seed, atol, rtol, calls)
    result.comparisons.append(Comparison(label, reference_label,
                                         compare_outputs(output_names, candidate, reference, atol, rtol), note))
    if torch_ref is not None:
        torch_out = run_torch(torch_ref, arrays)
        note = "" if len(torch_out) == len(output_names) else \
            f"the module returned {len(torch_out)} output(s); the model has {len(output_names)}"
        result.comparisons.append(Comparison(label, "the PyTorch module (float32, CPU)",
                                             compare_outputs(output_names, candidate, torch_out, atol, rtol), note))
    return result
