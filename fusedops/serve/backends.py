"""What `fusedops serve` runs behind Triton: one inference function over numpy batches, whatever executes it.

A source is a fused ONNX file, a TensorRT engine (``.plan`` / ``.engine``) or a reference model key ("1".."4" or
its name). ``open_backend(source, backend="auto")`` picks the fastest backend present for that source, in the order
the issue asks for: TensorRT engine → ONNX Runtime CUDA EP with ``libfusedops_ort.so`` → PyTorch CUDA ops
(``ModelNew``) → ONNX Runtime CPU with the library. ``torch-eager`` (the reference ``Model``, on the GPU when there is
one) is the baseline a user would serve without fusedops.

Every backend copies a batch to the device once, computes there, and copies the result back once: inside the server
nothing goes through the host between the request's bytes and the response's.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from fusedops import ort as fo_ort
from fusedops.errors import FusedopsError
from fusedops.trt_build import runtime

# In preference order for `--backend auto`; each entry says which sources it can serve.
BACKENDS = ("trt", "ort-cuda", "torch-cuda", "ort-cpu", "torch-eager")
ENGINE_SUFFIXES = (".plan", ".engine")


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output. ``shape`` is the full shape with -1 for dynamic dims (the batch included)."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]


@dataclass
class ServedModel:
    """A loaded backend. ``infer`` maps input name → array to output name → array for one (batched) call."""

    backend: str
    source: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    infer: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    device: str  # "cpu" or "cuda"
    notes: list[str] = field(default_factory=list)

    @property
    def batched(self) -> bool:
        return is_batched(self.inputs, self.outputs)


def is_batched(inputs: list[TensorSpec], outputs: list[TensorSpec]) -> bool:
    """Whether dim 0 of every input and output is the (dynamic) batch: Triton may then batch requests
    (max_batch_size > 0). Model 2's output, (1, C, N, 1), has its batch elsewhere, so it is served unbatched."""
    return all(len(t.shape) >= 1 and t.shape[0] == -1 and all(d > 0 for d in t.shape[1:]) for t in inputs + outputs)


def source_kind(source: str) -> str:
    """"onnx", "engine" or "model" (a reference model key); FusedopsError for a missing file."""
    path = Path(source)
    if path.suffix.lower() == ".onnx":
        if not path.is_file():
            raise FusedopsError(f"ONNX model {source!r} not found")
        return "onnx"
    if path.suffix.lower() in ENGINE_SUFFIXES:
        if not path.is_file():
            raise FusedopsError(f"TensorRT engine {source!r} not found")
        return "engine"
    from fusedops.models.registry import get_entry  # lazy: torch / onnx; cli/serve.py imports this module

    try:
        get_entry(source)
    except ValueError as e:
        raise FusedopsError(f"{source!r} is neither an .onnx file, a TensorRT engine (.plan/.engine) nor a "
                            f"reference model: {e}") from None
    return "model"


def _cuda_available() -> bool:
    try:
        import torch  # lazy: torch / onnx; cli/serve.py imports this module
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return torch.cuda.is_available()


def unavailable_reason(backend: str, kind: str) -> str | None:
    """Why ``backend`` cannot serve a source of ``kind`` here, or None when it can."""
    if backend not in BACKENDS:
        raise FusedopsError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)} or auto")
    if backend == "trt":
        if kind != "engine":
            return "the trt backend serves a TensorRT engine (.plan); build one with `fusedops build`"
        from fusedops.workflows.verify import _trt_available  # lazy: torch / onnx; cli/serve.py imports this module
        return _trt_available()
    if kind == "engine":
        return f"a TensorRT engine is served only by the trt backend, not {backend}"
    if backend.startswith("ort-"):
        provider = "CUDAExecutionProvider" if backend == "ort-cuda" else "CPUExecutionProvider"
        reason = fo_ort.unavailable_reason(provider)
        if reason:
            return reason
        if provider not in fo_ort.available_providers():
            return f"onnxruntime here has no {provider} (install onnxruntime-gpu, see the README)"
        return None
    if kind != "model":
        return f"the {backend} backend serves a reference model key (1-4), not an ONNX file"
    if backend == "torch-cuda":
        if not _cuda_available():
            return "no CUDA device"
        from fusedops.plugins import torch_ops  # lazy: torch / onnx; cli/serve.py imports this module
        check = getattr(torch_ops, "cuda_kernels_available", None)
        ok, why = check() if check else (True, "")
        return None if ok else why
    return None  # torch-eager runs anywhere


def choose_backend(source: str, backend: str = "auto") -> tuple[str, str]:
    """(backend, source kind) for ``source``: the requested backend if it can serve here (else FusedopsError with
    the reason), or with "auto" the first of BACKENDS that can. torch-eager is never chosen automatically."""
    kind = source_kind(source)
    if backend != "auto":
        reason = unavailable_reason(backend, kind)
        if reason:
            raise FusedopsError(f"backend {backend} cannot serve {source!r} here: {reason}")
        return backend, kind
    reasons = []
    for name in BACKENDS[:-1]:
        reason = unavailable_reason(name, kind)
        if reason is None:
            return name, kind
        reasons.append(f"{name}: {reason}")
    raise FusedopsError(f"no backend can serve {source!r} here ({'; '.join(reasons)})")


def open_backend(source: str, backend: str = "auto", size: str = "small") -> ServedModel:
    """Load ``source`` on ``backend`` ("auto" picks, see choose_backend). ``size`` applies to model keys."""
    name, kind = choose_backend(source, backend)
    if kind == "model" and name.startswith("ort-"):  # a model key on ONNX Runtime: export and fuse it first
        return _ort_backend(_export_to_temp(source, size), name, source)
    if name.startswith("ort-"):
        return _ort_backend(source, name, source)
    if name == "trt":
        return _trt_backend(source)
    return _torch_backend(source, size, fused=name == "torch-cuda")


# ---- ONNX Runtime -----------------------------------------------------------------------------------------------------

_ONNX_TO_NUMPY = {1: np.float32, 10: np.float16, 11: np.float64, 6: np.int32, 7: np.int64}


def onnx_specs(path: str | Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's inputs (initializers excluded) and outputs with numpy dtypes and -1 for symbolic dims."""
    import onnx  # lazy: torch / onnx; cli/serve.py imports this module

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}

    def spec(vi) -> TensorSpec:
        tt = vi.type.tensor_type
        if tt.elem_type not in _ONNX_TO_NUMPY:
            raise FusedopsError(f"tensor {vi.name!r} has ONNX element type {tt.elem_type}, which serving does not "
                                f"support (float32, float16, float64, int32, int64)")
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        return TensorSpec(vi.name, np.dtype(_ONNX_TO_NUMPY[tt.elem_type]), dims)

    return ([spec(i) for i in graph.input if i.name not in initializers], [spec(o) for o in graph.output])


def _ort_backend(onnx_path: str | Path, backend: str, source: str) -> ServedModel:
    inputs, outputs = onnx_specs(onnx_path)
    names = [o.name for o in outputs]
    if backend == "ort-cuda":
        # One host→device copy of each input into buffers bound once per shape, ORT's CUDA graph of the model where
        # the session accepts it, one device→host copy of each output; every intermediate stays on the device.
        from .ort_cuda_runner import CudaRunner  # lazy: imports onnxruntime, which only the ORT backends need

        runner = CudaRunner(str(onnx_path), [i.name for i in inputs], names)
        notes = ["ORT CUDA graph per input shape" if runner.uses_graph
                 else f"no ORT CUDA graph ({runner.graph_refused})"]
        return ServedModel(backend, source, inputs, outputs, runner, "cuda", notes)
    sess = fo_ort.session(str(onnx_path), providers=["CPUExecutionProvider"])

    def infer(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, sess.run(names, feeds)))

    return ServedModel(backend, source, inputs, outputs, infer, "cpu")


def _export_to_temp(model_key: str, size: str) -> Path:
    from fusedops.exporter_api import export  # lazy: torch / onnx; cli/serve.py imports this module

    folder = Path(tempfile.mkdtemp(prefix="fusedops-serve-"))
    return Path(export(model_key, str(folder / "model.onnx"), size=size))


# ---- TensorRT -----------------------------------------------------------------------------------------------------

def _trt_backend(engine_path: str) -> ServedModel:
    eng = runtime.Engine.load(engine_path)

    def spec(name: str) -> TensorSpec:
        dt = eng._np_dtype(name)
        if dt == "bfloat16":
            raise FusedopsError(f"engine tensor {name!r} is bfloat16, which KServe v2 clients cannot send as numpy")
        return TensorSpec(name, np.dtype(dt), tuple(int(d) for d in eng.engine.get_tensor_shape(name)))

    inputs = [spec(n) for n in eng.input_names]
    outputs = [spec(n) for n in eng.output_names]

    def infer(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        _current_cuda_context()
        out = eng.run(feeds)  # host inputs copied once into device buffers; outputs stay there until to_numpy
        return {n: runtime.to_numpy(out[n]) for n in eng.output_names}

    return ServedModel("trt", engine_path, inputs, outputs, infer, "cuda")


def _current_cuda_context() -> None:
    """pycuda makes its context current only in the thread that imported it; PyTriton calls the inference function
    from its own thread, so make the device's primary context current there (TensorRT and torch share it)."""
    import pycuda.driver as cuda  # lazy: optional (gpu extra), only when serving an engine

    cuda.init()
    if cuda.Context.get_current() is None:
        cuda.Device(0).retain_primary_context().push()


# ---- PyTorch ------------------------------------------------------------------------------------------------------

def torch_specs(model_key: str, size: str) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """What the PyTorch backends serve for a model key, found without loading them: the reference ``Model`` on the
    CPU at batch 2 (ModelNew has the same signature). A launcher that runs the model elsewhere (the Python-backend
    stub) needs the shapes for the model configuration first."""
    import torch  # lazy: torch / onnx; cli/serve.py imports this module

    from fusedops.models.registry import get_entry

    entry = get_entry(model_key)
    model = entry.build(size, "Model").eval()
    with torch.no_grad():
        x = entry.inputs(size, batch=2)[0]
        y, y3 = model(x), model(entry.inputs(size, batch=3)[0])
    if y.shape[0] != 2 or y3.shape[0] != 3 or y.shape[1:] != y3.shape[1:]:
        raise FusedopsError(f"model {entry.key}: its output {tuple(y.shape)} does not keep the batch in dim 0, "
                            f"so the PyTorch backends cannot serve it batched; serve its ONNX export instead")
    return ([TensorSpec("input", np.dtype(np.float32), (-1, *x.shape[1:]))],
            [TensorSpec("output", np.dtype(np.float32), (-1, *y.shape[1:]))])


def _torch_backend(model_key: str, size: str, fused: bool) -> ServedModel:
    import torch  # lazy: torch / onnx; cli/serve.py imports this module

    from fusedops.models.registry import get_entry

    entry = get_entry(model_key)
    device = "cuda" if (fused or _cuda_available()) else "cpu"
    if device == "cuda":  # TF32 GEMMs, as the fused GPU runtimes use by default: both sides at the same precision
        torch.set_float32_matmul_precision("high")
    model = entry.build(size, "ModelNew" if fused else "Model").to(device).eval()
    with torch.no_grad():  # two batch sizes: the output's dim 0 must follow the batch and nothing else may
        out, out3 = (model(entry.inputs(size, batch=b, device=device)[0]) for b in (2, 3))
    probe = entry.inputs(size, batch=1)[0]
    if out.shape[0] != 2 or out3.shape[0] != 3 or out.shape[1:] != out3.shape[1:]:
        raise FusedopsError(f"model {entry.key}: its output {tuple(out.shape)} does not keep the batch in dim 0, "
                            f"so the PyTorch backends cannot serve it batched; serve its ONNX export instead")
    inputs = [TensorSpec("input", np.dtype(np.float32), (-1, *probe.shape[1:]))]
    outputs = [TensorSpec("output", np.dtype(np.float32), (-1, *out.shape[1:]))]

    def infer(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feeds["input"]
        # PyTriton hands requests over in read-only shared memory, which torch.from_numpy warns about
        x = torch.from_numpy(x if x.flags.writeable else x.copy()).to(device, non_blocking=True)
        with torch.no_grad():
            y = model(x)
        return {"output": y.float().cpu().numpy()}  # the one device→host copy (synchronises the stream)

    name = "torch-cuda" if fused else "torch-eager"
    return ServedModel(name, model_key, inputs, outputs, infer, device)
