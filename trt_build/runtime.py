"""Run a TensorRT engine built by ``trt_build.builder``: load, bind buffers, execute on a stream, CUDA-graph replay.

Buffers: any object exposing ``__cuda_array_interface__`` (torch CUDA tensors, CuPy arrays, pycuda GPUArrays) is
bound directly, zero-copy; host arrays (numpy, CPU torch) are copied into pycuda allocations. Outputs are pycuda
GPUArrays unless the caller passes its own buffers. ``verify(engine, entry)`` runs a reference model's input through
the engine and compares with eager PyTorch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusedops.errors import FusedopsError
from fusedops.trt_build.builder import _import_tensorrt, default_plugin_library

# numpy type strings of __cuda_array_interface__ → numpy dtypes TensorRT tensors may have.
_TYPESTR = {"<f4": np.float32, "<f2": np.float16, "<i4": np.int32, "<i8": np.int64, "|i1": np.int8, "|u1": np.uint8,
            "|b1": np.bool_}


@dataclass(frozen=True)
class DeviceBuffer:
    """A device pointer with its shape and dtype, from any __cuda_array_interface__ object (kept alive by `owner`)."""

    ptr: int
    shape: tuple[int, ...]
    dtype: Any  # numpy dtype, or the string "bfloat16"
    owner: Any = None

    @classmethod
    def from_cuda_array(cls, obj) -> "DeviceBuffer":
        iface = getattr(obj, "__cuda_array_interface__", None)
        if iface is None:
            raise FusedopsError(f"{type(obj).__name__} is not a CUDA buffer (no __cuda_array_interface__)")
        shape = tuple(int(d) for d in iface["shape"])
        typestr = iface["typestr"]
        dtype = _TYPESTR.get(typestr)
        if dtype is None:
            # torch bfloat16 reports "<V2" (no numpy type); trust the object's own dtype name when it says so.
            if typestr == "<V2" and "bfloat16" in str(getattr(obj, "dtype", "")):
                dtype = "bfloat16"
            else:
                raise FusedopsError(f"unsupported CUDA buffer element type {typestr!r}")
        strides = iface.get("strides")
        if strides is not None:
            item = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
            expected, acc = [], item
            for d in reversed(shape):
                expected.append(acc)
                acc *= max(d, 1)
            if tuple(strides) != tuple(reversed(expected)) and int(np.prod(shape)) > 1:
                raise FusedopsError(f"CUDA buffer of shape {shape} is not contiguous (strides {strides}); "
                                    f"pass a contiguous copy")
        return cls(int(iface["data"][0]), shape, dtype, obj)


def same_dtype(got, want) -> bool:
    """Buffer dtype equality where bfloat16 is the string "bfloat16" (numpy has no such type)."""
    if isinstance(got, str) or isinstance(want, str):
        return got == want
    return np.dtype(got) == np.dtype(want)


def host_array(value) -> tuple[np.ndarray, Any]:
    """A host input as a contiguous numpy array plus its engine dtype; torch bfloat16 (which .numpy() refuses)
    travels as its raw 16-bit pattern with dtype "bfloat16"."""
    if hasattr(value, "detach"):
        t = value.detach().cpu().contiguous()
        if str(t.dtype) == "torch.bfloat16":
            import torch  # lazy: only for a bfloat16 torch tensor; serving an engine needs no torch

            return t.view(torch.int16).numpy().view(np.uint16), "bfloat16"
        arr = t.numpy()
    else:
        arr = np.ascontiguousarray(np.asarray(value))
    return arr, arr.dtype


def _load_cudart():
    """libcudart for stream capture (TensorRT needs no more than the runtime API here)."""
    names = [ctypes.util.find_library("cudart"), "libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    for n in names:
        if not n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError:
            continue
    try:  # lazy: optional: the copy that ships with the tensorrt / nvidia wheels, if any
        import nvidia.cuda_runtime as m  # type: ignore

        for p in Path(list(m.__path__)[0], "lib").glob("libcudart.so*"):
            return ctypes.CDLL(str(p))
    except Exception:
        pass
    raise FusedopsError("libcudart not found (needed for CUDA-graph capture)")


class CudaGraph:
    """A CUDA graph captured from one engine execution on a stream; replay() relaunches it (same shapes, same
    buffers: TensorRT kernels read the addresses bound at capture time)."""

    def __init__(self, cudart, graph_exec, graph):
        self._rt, self._exec, self._graph = cudart, graph_exec, graph

    def replay(self, stream_handle: int) -> None:
        err = self._rt.cudaGraphLaunch(self._exec, ctypes.c_void_p(stream_handle))
        if err:
            raise FusedopsError(f"cudaGraphLaunch failed (error {err})")

    def __del__(self):
        try:
            self._rt.cudaGraphExecDestroy(self._exec)
            self._rt.cudaGraphDestroy(self._graph)
        except Exception:
            pass


class Engine:
    """A deserialised engine with one execution context.

    >>> eng = Engine.load("model.plan")             # plugin library from model.plan.json or $FUSEDOPS_TRT_PLUGIN
    >>> outs = eng.run({"x": torch_cuda_tensor})    # dict name -> DeviceBuffer (pycuda-owned unless given)
    """

    def __init__(self, trt, engine, plugin_library: str | None):
        self.trt = trt
        self.engine = engine
        self.plugin_library = plugin_library
        self.context = engine.create_execution_context()
        if self.context is None:
            raise FusedopsError("TensorRT could not create an execution context (out of device memory?)")
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.input_names = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self._stream = None
        self._owned: list = []

    # ---- loading ----
    @classmethod
    def load(cls, path, plugin_library=None) -> "Engine":
        path = Path(path)
        if not path.is_file():
            raise FusedopsError(f"engine not found: {path}")
        trt = _import_tensorrt()
        if plugin_library is None:
            meta = path.with_name(path.name + ".json")
            if meta.is_file():
                plugin_library = json.loads(meta.read_text()).get("plugin_library")
            plugin_library = plugin_library or default_plugin_library()
        logger = trt.Logger(trt.Logger.WARNING)
        runtime = trt.Runtime(logger)
        if plugin_library:
            if not Path(plugin_library).is_file():
                raise FusedopsError(f"plugin library not found: {plugin_library}")
            runtime.get_plugin_registry().load_library(str(plugin_library))
        engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise FusedopsError(f"TensorRT could not deserialise {path} (built by another TensorRT version or "
                                f"for another GPU, or its plugin library is missing)")
        eng = cls(trt, engine, str(plugin_library) if plugin_library else None)
        eng._runtime, eng._logger = runtime, logger  # keep alive as long as the engine
        return eng

    # ---- buffers ----
    def _np_dtype(self, name: str):
        dt = self.engine.get_tensor_dtype(name)
        if dt == self.trt.DataType.BF16:
            return "bfloat16"
        return np.dtype(self.trt.nptype(dt))

    @property
    def stream(self):
        if self._stream is None:
            # lazy: optional (gpu extra); autoprimaryctx: the primary context, shared with torch / TensorRT
            import pycuda.autoprimaryctx  # noqa: F401
            import pycuda.driver as cuda

            self._stream = cuda.Stream()
        return self._stream

    def _to_device(self, name: str, value) -> DeviceBuffer:
        if hasattr(value, "__cuda_array_interface__"):
            buf = DeviceBuffer.from_cuda_array(value)
        else:
            import pycuda.gpuarray as gpuarray  # lazy: optional (gpu extra)

            host, dtype = host_array(value)
            _ = self.stream  # creates the context before the first allocation
            arr = gpuarray.to_gpu(host)  # synchronous: safe on whatever stream executes
            buf = DeviceBuffer(int(arr.gpudata), tuple(host.shape), dtype, arr)
        want = self._np_dtype(name)
        if not same_dtype(buf.dtype, want):
            raise FusedopsError(f"input {name!r} must be {want}, got {buf.dtype}")
        return buf

    def bind(self, inputs: Mapping[str, Any] | Sequence[Any], outputs: Mapping[str, Any] | None = None) \
            -> dict[str, DeviceBuffer]:
        """Set shapes and addresses for one execution; returns the output buffers (allocated if not given)."""
        if not isinstance(inputs, Mapping):
            inputs = dict(zip(self.input_names, inputs))
        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise FusedopsError(f"missing engine input(s) {', '.join(missing)}; inputs are {self.input_names}")
        self._owned = []
        for name in self.input_names:
            buf = self._to_device(name, inputs[name])
            if not self.context.set_input_shape(name, buf.shape):
                raise FusedopsError(f"input {name!r}: shape {buf.shape} is outside the engine's optimisation profile")
            self.context.set_tensor_address(name, buf.ptr)
            self._owned.append(buf)
        out: dict[str, DeviceBuffer] = {}
        for name in self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            if outputs is not None and name in outputs:
                buf = DeviceBuffer.from_cuda_array(outputs[name])
                if buf.shape != shape:
                    raise FusedopsError(f"output {name!r} buffer has shape {buf.shape}, the engine writes {shape}")
                want = self._np_dtype(name)
                if not same_dtype(buf.dtype, want):
                    raise FusedopsError(f"output {name!r} buffer is {buf.dtype}, the engine writes {want}")
            else:
                import pycuda.gpuarray as gpuarray  # lazy: optional (gpu extra)

                dt = self._np_dtype(name)
                arr = gpuarray.empty(shape, dtype=np.uint16 if dt == "bfloat16" else dt)
                buf = DeviceBuffer(int(arr.gpudata), shape, dt, arr)
            self.context.set_tensor_address(name, buf.ptr)
            out[name] = buf
            self._owned.append(buf)
        return out

    def execute(self, stream_handle: int | None = None) -> None:
        handle = stream_handle if stream_handle is not None else self.stream.handle
        if not self.context.execute_async_v3(handle):
            raise FusedopsError("TensorRT execution failed (see the log above)")

    def run(self, inputs, outputs=None, stream_handle: int | None = None, sync: bool = True) -> dict[str, DeviceBuffer]:
        out = self.bind(inputs, outputs)
        self.execute(stream_handle)
        if sync:
            self.synchronize(stream_handle)
        return out

    def synchronize(self, stream_handle: int | None = None) -> None:
        if stream_handle is None:
            self.stream.synchronize()
        else:
            rt = _load_cudart()
            err = rt.cudaStreamSynchronize(ctypes.c_void_p(stream_handle))
            if err:
                raise FusedopsError(f"cudaStreamSynchronize failed (error {err})")

    def capture_graph(self, inputs, outputs=None) -> tuple[CudaGraph, dict[str, DeviceBuffer]]:
        """Bind, run once (TensorRT settles shape-dependent state on the first enqueue), then capture one execution
        into a CUDA graph. Replays reuse the bound buffers: write new inputs into them in place."""
        out = self.run(inputs, outputs)
        rt = _load_cudart()
        handle = self.stream.handle
        graph, graph_exec = ctypes.c_void_p(), ctypes.c_void_p()
        capture_mode_thread_local = 1  # cudaStreamCaptureModeThreadLocal
        err = rt.cudaStreamBeginCapture(ctypes.c_void_p(handle), capture_mode_thread_local)
        if err:
            raise FusedopsError(f"cudaStreamBeginCapture failed (error {err})")
        try:
            self.execute(handle)
        finally:
            end_err = rt.cudaStreamEndCapture(ctypes.c_void_p(handle), ctypes.byref(graph))
        if end_err or not graph.value:
            raise FusedopsError(f"CUDA graph capture of the engine failed (error {end_err}); an engine whose "
                                f"layers synchronise cannot be captured")
        err = rt.cudaGraphInstantiate(ctypes.byref(graph_exec), graph, ctypes.c_ulonglong(0))
        if err:
            rt.cudaGraphDestroy(graph)
            raise FusedopsError(f"cudaGraphInstantiate failed (error {err})")
        return CudaGraph(rt, graph_exec, graph), out


def to_numpy(buf: DeviceBuffer) -> np.ndarray:
    """Copy a device buffer to the host (bfloat16 comes back as float32)."""
    owner = buf.owner
    if hasattr(owner, "get"):  # pycuda GPUArray
        host = owner.get()
    elif hasattr(owner, "detach"):  # torch
        return owner.detach().float().cpu().numpy() if buf.dtype == "bfloat16" else owner.detach().cpu().numpy()
    else:
        import pycuda.driver as cuda  # lazy: optional (gpu extra)

        nbytes = int(np.prod(buf.shape)) * (2 if buf.dtype == "bfloat16" else np.dtype(buf.dtype).itemsize)
        host = np.empty(nbytes, dtype=np.uint8)
        cuda.memcpy_dtoh(host, buf.ptr)
        host = host.view(np.uint16 if buf.dtype == "bfloat16" else buf.dtype).reshape(buf.shape)
    if buf.dtype == "bfloat16":
        return (host.astype(np.uint32) << 16).view(np.float32)
    return host


def verify(engine: Engine | str | Path, entry, size: str = "small", batch: int | None = None, rtol: float = 1e-2,
           atol: float = 1e-2, seed: int = 0) -> dict:
    """Run a fresh input of reference model ``entry`` (a registry entry or its name) through the engine and compare
    with eager PyTorch (TF32 tolerance by default). Returns {"ok", "max_abs_err", "shape"}."""
    import torch  # lazy: torch and the models only to check against eager PyTorch; serving needs neither

    from fusedops.models import get_entry

    if isinstance(entry, str):
        entry = get_entry(entry)
    if not isinstance(engine, Engine):
        engine = Engine.load(engine)
    if len(engine.input_names) != 1 or len(engine.output_names) != 1:
        raise FusedopsError(f"verify expects one input and one output, the engine has {engine.input_names} -> "
                            f"{engine.output_names}")
    model = entry.build(size)
    gen = torch.Generator().manual_seed(seed)
    (x,) = entry.inputs(size, batch=batch, generator=gen)
    with torch.no_grad():
        ref = model(x).double().numpy()
    out = engine.run({engine.input_names[0]: x.numpy()})
    got = to_numpy(out[engine.output_names[0]]).astype(np.float64)
    if got.shape != ref.shape:
        raise FusedopsError(f"engine output shape {got.shape} differs from eager PyTorch {ref.shape}")
    err = float(np.max(np.abs(got - ref))) if got.size else 0.0
    ok = bool(np.all(np.abs(got - ref) <= atol + rtol * np.abs(ref)))
    return {"ok": ok, "max_abs_err": err, "shape": list(got.shape)}
