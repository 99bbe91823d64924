"""Serving on ONNX Runtime's CUDA EP with the least host work a batch can cost.

``session.run(names, feeds)`` with numpy arrays pays ORT's per-run host work (54-106 µs on the H200 host,
docs/latency.md) on top of the copies. Here each distinct input shape gets device buffers bound once (IOBinding), and
where the session accepts ORT's own CUDA graph (CUDA EP option ``enable_cuda_graph``; ORT refuses it when a node runs
outside the CUDA EP) one captured graph per shape (run option ``gpu_graph_id``), so a batch is: copy the inputs into
their bound buffers, replay, copy the outputs out. ORT captures a shape's graph after its first regular runs; the
fusedops kernels make their plans in those runs and are captured as they are (docs/latency.md, 2026-11-23).

A graph bakes in buffer addresses, never contents, so a buffer is reused only for the shape it was bound for; shapes
past ``max_shapes`` run on a one-off binding without a graph (``gpu_graph_id`` -1: neither captured nor replayed).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from fusedops import ort as fo_ort
from fusedops.errors import FusedopsError

CUDA_EP = "CUDAExecutionProvider"
GRAPH_SKIP = -1  # ORT's kCudaGraphAnnotationSkip: the run neither captures nor replays a graph


@dataclass
class _Binding:
    """One input shape's device buffers and the IOBinding / run options that use them."""

    io: object
    inputs: dict = field(default_factory=dict)  # name -> OrtValue on the device
    outputs: dict | None = None  # name -> OrtValue on the device, bound after the shape's first run
    run_options: object = None  # GRAPH_SKIP until the shape has buffers of its own, then its own graph id


class CudaRunner:
    """Callable: input name -> numpy array to output name -> numpy array, one batch on the CUDA EP."""

    def __init__(self, onnx_path: str, input_names: list[str], output_names: list[str], device_id: int = 0,
                 use_graph: bool = True, max_shapes: int = 128):
        self.input_names, self.output_names = list(input_names), list(output_names)
        self.device_id, self.max_shapes = device_id, max_shapes
        self.graph_refused: str | None = None
        self.sess = None
        if use_graph:
            try:
                self.sess = fo_ort.session(onnx_path, providers=[CUDA_EP],
                                           provider_options=[{"device_id": str(device_id), "enable_cuda_graph": "1"}])
            except FusedopsError as e:  # e.g. a node placed on the CPU: keep serving, without graphs
                self.graph_refused = str(e)
        self.uses_graph = self.sess is not None
        if self.sess is None:
            self.sess = fo_ort.session(onnx_path, providers=[CUDA_EP],
                                       provider_options=[{"device_id": str(device_id)}])
        self._bindings: dict[tuple, _Binding] = {}
        self._graph_ids = 0
        self._lock = threading.Lock()  # one batch at a time: the bound buffers are shared state

    def _run_options(self, graph_id: int):
        options = ort.RunOptions()
        if self.uses_graph:
            options.add_run_config_entry("gpu_graph_id", str(graph_id))
        return options

    def _binding(self, feeds: dict[str, np.ndarray]) -> _Binding:
        b = _Binding(self.sess.io_binding(), run_options=self._run_options(GRAPH_SKIP))
        for name in self.input_names:
            x = feeds[name]
            b.inputs[name] = ort.OrtValue.ortvalue_from_shape_and_type(list(x.shape), x.dtype, "cuda", self.device_id)
            b.io.bind_ortvalue_input(name, b.inputs[name])
        for name in self.output_names:  # ORT allocates them in the first run; they stay bound from then on
            b.io.bind_output(name, "cuda", self.device_id)
        return b

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        key = tuple((n, feeds[n].shape, feeds[n].dtype.str) for n in self.input_names)
        with self._lock:
            b = self._bindings.get(key)
            first = b is None
            if first:
                cached = len(self._bindings) < self.max_shapes
                b = self._binding(feeds)  # the shape's first run: no graph (GRAPH_SKIP), ORT allocates the outputs
                if cached:
                    self._bindings[key] = b
            for name in self.input_names:
                b.inputs[name].update_inplace(np.ascontiguousarray(feeds[name]))
            # synchronises the EP's stream before returning, so the outputs are complete when copied out below
            self.sess.run_with_iobinding(b.io, b.run_options)
            if first:
                b.outputs = dict(zip(self.output_names, b.io.get_outputs()))
                if key in self._bindings:  # later runs write the same buffers, so a captured graph stays valid
                    for name, value in b.outputs.items():
                        b.io.bind_ortvalue_output(name, value)
                    self._graph_ids += 1
                    b.run_options = self._run_options(self._graph_ids)
            return {name: value.numpy() for name, value in b.outputs.items()}
