"""Where the synchronous time of one call goes (GPU machine), for models 1-3 at the given precisions and batches:
the GPU kernels of one eager and one ModelNew forward (durations from torch.profiler's CUDA activity), the host time
of the fused op through each layer (the Python wrapper, the raw OpOverload, ModelNew's forward; inference_mode), the
synchronous per-call time of each next to its CUDA-graph replay, and a torch.profiler CPU breakdown of the op.

    python tools/profile_enqueue.py [--models 1 2 3] [--precisions tf32 bf16] [--batches 1 16] [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict

import torch

from fusedops.benchmark.timing import dtype_of, precision_mode, time_cuda_graph
from fusedops.models import get_entry
from fusedops.plugins import torch_ops


def enqueue_us(fn, calls: int) -> float:
    """Median host time of one call issued back to back (the launch queue kept short)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    ts = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if i % 256 == 255:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(ts) * 1e6


def sync_us(fn, calls: int) -> float:
    """Median wall time of one call followed by a synchronisation (what a serving caller waits)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def captured_replay(fn):
    """fn captured once in a CUDA graph; returns the graph's replay (warm-up on a side stream first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def graph_us(fn, x) -> float:
    return time_cuda_graph(lambda _x: fn(), [x], repeats=100, warmup=5).median_ms * 1e3


def kernel_table(fn, runs: int = 20, sync: bool = False) -> list[tuple[str, float]]:
    """GPU kernels (and memsets/copies) of one call: name and mean duration over `runs` calls, in launch order;
    ``sync``: each call waited for (the GPU idle before every call, as a serving process runs it)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
            if sync:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    per_name: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if ev.name not in per_name:
            order.append(ev.name)
        per_name[ev.name].append(ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total)
    return [(n, sum(per_name[n]) / runs) for n in order]


def sync_timeline(fn, runs: int = 30) -> dict[str, float]:
    """Where the wall time of a synchronous call goes, from one torch.profiler trace (CPU and GPU on one clock):
    medians over ``runs`` calls of: host work before the first launch API, launch API start -> first GPU activity,
    GPU span (first start -> last end), GPU idle inside that span, last GPU end -> synchronize returned, and the total
    (the profiler's own overhead inflates the host parts by a few microseconds)."""
    for _ in range(5):
        fn()
        torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            with torch.profiler.record_function("timeline_call"):
                fn()
                torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = [e for e in json.load(open(f.name))["traceEvents"] if e.get("ph") == "X"]
    return timeline_parts(events)


def timeline_parts(events: list[dict]) -> dict[str, float]:
    """sync_timeline's arithmetic on chrome-trace events ("X" phase: name, cat, ts, dur in microseconds)."""
    calls = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "timeline_call")
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and "aunch" in e["name"]]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    parts: dict[str, list[float]] = defaultdict(list)
    for t0, t1 in calls:
        lau = [e["ts"] for e in launches if t0 <= e["ts"] <= t1]
        work = sorted((e["ts"], e["ts"] + e["dur"]) for e in gpu if t0 <= e["ts"] <= t1)
        if not lau or not work:
            continue
        busy, end = 0.0, work[0][0]
        for s, e in work:
            busy += max(0.0, e - max(s, end))
            end = max(end, e)
        parts["host before launch"].append(min(lau) - t0)
        parts["launch -> GPU start"].append(work[0][0] - min(lau))
        parts["GPU span"].append(end - work[0][0])
        parts["GPU idle in span"].append(end - work[0][0] - busy)
        parts["GPU end -> sync return"].append(t1 - end)
        parts["total"].append(t1 - t0)
    return {k: statistics.median(v) for k, v in parts.items()}


def print_timelines(calls_of: dict) -> None:
    rows = {name: sync_timeline(fn) for name, fn in calls_of.items()}
    cols = next(iter(rows.values())).keys() if rows else ()
    print(f"  synchronous call timeline (us, medians, profiled): {' | '.join(cols)}")
    for name, parts in rows.items():
        print(f"    {name:40s} " + " | ".join(f"{parts.get(c, float('nan')):7.1f}" for c in cols))


def profile(key: str, p: str, batch: int, calls: int) -> None:
    e = get_entry(key)
    dev = torch.device("cuda")
    ref = e.build("bench").to(dev)
    new = e.build("bench", cls_name="ModelNew").to(dev)
    new.load_state_dict(ref.state_dict())
    dt = dtype_of(p)
    ref, new = ref.to(dt), new.to(dt)
    x = e.inputs("bench", batch=batch, generator=torch.Generator().manual_seed(1), device=dev, dtype=dt)[0]
    lin = next(m for m in new.modules() if isinstance(m, torch.nn.Linear))
    captured = []
    original = torch_ops.gemm_group_norm_act
    torch_ops.gemm_group_norm_act = lambda *a, **k: (captured.append((a, k)), original(*a, **k))[1]
    try:
        with torch.inference_mode(), precision_mode(p):
            new(x)
    finally:
        torch_ops.gemm_group_norm_act = original
    args, kwargs = captured[0]
    op = torch_ops.load()[1]
    print(f"\n== model {key}, {p}, batch {batch}: {tuple(x.shape)} @ {tuple(lin.weight.shape)}")
    with torch.inference_mode(), precision_mode(p):
        calls_of = {
            "eager forward": lambda: ref(x),
            "ModelNew forward": lambda: new(x),
            "wrapper torch_ops.gemm_group_norm_act": lambda: original(*args, **kwargs),
            "OpOverload": lambda: op(*args, **kwargs),
        }
        print(f"  {'call':42s} {'enqueue us':>10s} {'sync us':>9s} {'graph us':>9s} {'sync-graph':>10s}")
        for name, fn in calls_of.items():
            enq, syn, gr = enqueue_us(fn, calls), sync_us(fn, min(calls, 500)), graph_us(fn, x)
            print(f"  {name:42s} {enq:10.2f} {syn:9.2f} {gr:9.2f} {syn - gr:10.2f}")
        # The floors of a synchronous call: ModelNew's forward replayed from a CUDA graph (no host work but the
        # replay), and a one-element add (launch + synchronise of the smallest kernel).
        replay = captured_replay(lambda: new(x))
        tiny = torch.ones(1, device=dev)
        floors = {"ModelNew graph replay": replay, "one-element add": lambda: tiny.add_(1)}
        for name, fn in floors.items():
            print(f"  {name:42s} {enqueue_us(fn, calls):10.2f} {sync_us(fn, min(calls, 500)):9.2f}")
        print_timelines({**calls_of, **floors})
        for name in ("eager forward", "ModelNew forward"):
            print(f"  GPU activity of one {name} (us: back to back | synchronised calls):")
            waited = dict(kernel_table(calls_of[name], sync=True))
            for kname, us in kernel_table(calls_of[name]):
                print(f"    {us:8.2f} | {waited.get(kname, float('nan')):8.2f}  {kname[:100]}")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(200):
                op(*args, **kwargs)
            torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["1", "2", "3"])
    ap.add_argument("--precisions", nargs="+", default=["tf32", "bf16"])
    ap.add_argument("--batches", nargs="+", default=["1", "16"], help="batch sizes; 'ref' = the model's own")
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for key in a.models:
        for p in a.precisions:
            for b in a.batches:
                profile(key, p, get_entry(key).bench.input_shape[0] if b == "ref" else int(b), a.calls)


if __name__ == "__main__":
    main()
