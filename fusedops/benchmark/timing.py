"""Precision modes and CUDA-event timing shared by ``fusedops bench`` and ``fusedops bench --latency``."""

from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..errors import FusedopsError

PRECISIONS = ("fp32", "tf32", "bf16")


@contextlib.contextmanager
def precision_mode(p: str):
    """fp32: strict FP32 GEMMs and convolutions; tf32 / bf16: TF32 allowed for any float32 leftover."""
    if p not in PRECISIONS:
        raise FusedopsError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
    old_mm, old_cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("highest" if p == "fp32" else "high")
        torch.backends.cudnn.allow_tf32 = p != "fp32"
        yield
    finally:
        torch.set_float32_matmul_precision(old_mm)
        torch.backends.cudnn.allow_tf32 = old_cudnn


def dtype_of(p: str) -> torch.dtype:
    return torch.bfloat16 if p == "bf16" else torch.float32


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    peak_extra_bytes: int
    output_bytes: int


def time_cuda(fn: Callable[[torch.Tensor], torch.Tensor], inputs: Sequence[torch.Tensor], repeats: int,
              warmup: int) -> Timing:
    """Median CUDA-event time of fn(inputs[i % len(inputs)]); peak memory beyond the state before the timed runs."""
    with torch.no_grad():
        for i in range(warmup):
            out = fn(inputs[i % len(inputs)])
        del out
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        events = []
        out_bytes = 0
        for i in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(inputs[i % len(inputs)])
            end.record()
            out_bytes = out.numel() * out.element_size()
            del out  # freed stream-ordered: the next run may reuse it, as a real caller's would
            events.append((start, end))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    times = [s.elapsed_time(e) for s, e in events]
    return Timing(statistics.median(times), min(times), max(times), peak, out_bytes)


class CapturedCalls:
    """fn(x) captured once per input in a CUDA graph (one memory pool), after a warm-up on a side stream (library
    load, handles, algorithm choice, compilation). ``replay(x)`` replays x's graph: the call with no host work but
    the replay itself, so its synchronised wall time is the floor of any synchronous caller."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], inputs: Sequence[torch.Tensor]):
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for x in inputs:
                    fn(x)
            torch.cuda.current_stream().wait_stream(side)
            pool = torch.cuda.graph_pool_handle()
            self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
            self.outs = []
            for x in inputs:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    self.outs.append(fn(x))
                self.graphs[id(x)] = g
        self.inputs = list(inputs)

    def replay(self, x: torch.Tensor) -> None:
        self.graphs[id(x)].replay()

    def time(self, repeats: int, warmup: int) -> Timing:
        """Median CUDA-event time of one replay (replays queued back to back: GPU time alone)."""
        n = len(self.inputs)
        for i in range(warmup):
            self.replay(self.inputs[i % n])
        events = []
        for i in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.replay(self.inputs[i % n])
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in events]
        out_bytes = self.outs[0].numel() * self.outs[0].element_size()
        return Timing(statistics.median(times), min(times), max(times), 0, out_bytes)


def time_cuda_graph(fn: Callable[[torch.Tensor], torch.Tensor], inputs: Sequence[torch.Tensor], repeats: int,
                    warmup: int) -> Timing:
    """Like time_cuda, but each input's call is captured once in a CUDA graph and replayed: GPU time without the
    host's launch overhead (Python, dispatch, ctypes). Peak memory is not measured here (0)."""
    return CapturedCalls(fn, inputs).time(repeats, warmup)
