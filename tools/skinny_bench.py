"""A/B timing of the GemmGroupNormAct GEMM at a few rows: the skinny kernel against cuBLASLt (both followed by the same
GroupNorm epilogue), at the reference models' W (C = K = 8192), for M = 1 .. 16.

    python tools/skinny_bench.py [--json PATH] [--rows 1 2 4 8 16] [--calls 50] [--sync]

Each entry: median of 7 CUDA-event-timed replays of a CUDA graph holding `calls` runs of one plan (GPU time per call,
no host overhead), plus the W read rate it implies (W bytes / time). Inputs fresh random; outputs checked against
each other (the skinny kernel's float32 FMA vs cuBLASLt's TF32 / BF16 tensor cores) as a sanity check. `--sync` adds
what a serving caller waits for: one run followed by a synchronisation, the two kernels in alternating rounds (the
graph time leaves out cuBLASLt's per-call host work, which a synchronous caller pays before its GEMM starts).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

from fusedops import catalog
from fusedops.plugins import abi

GEMM = catalog.GEMM_GROUP_NORM_ACT.name
DEV = torch.device("cuda")


def time_plan(plan, ptrs, y, ws, calls: int) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            plan.run(ptrs, y.data_ptr(), ws.data_ptr(), plan.workspace, stream.cuda_stream)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            plan.run(ptrs, y.data_ptr(), ws.data_ptr(), plan.workspace, stream.cuda_stream)
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def sync_us(plans: dict, ptrs, ys: dict, wss: dict, calls: int = 500, rounds: int = 5) -> dict:
    """Median wall time of one run followed by a synchronisation (what a serving caller waits: host work before the
    GEMM starts + GPU time), per plan, in alternating rounds. Both go through the same ctypes call, so the difference
    is the kernels' host and GPU cost."""
    stream = torch.cuda.current_stream().cuda_stream
    samples = {k: [] for k in plans}
    for k, plan in plans.items():
        for _ in range(20):
            plan.run(ptrs, ys[k].data_ptr(), wss[k].data_ptr(), plan.workspace, stream)
    torch.cuda.synchronize()
    for _ in range(rounds):
        for k, plan in plans.items():
            for _ in range(calls // rounds):
                t0 = time.perf_counter()
                plan.run(ptrs, ys[k].data_ptr(), wss[k].data_ptr(), plan.workspace, stream)
                torch.cuda.synchronize()
                samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in samples.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--json", help="write the table as JSON here")
    ap.add_argument("--sync", action="store_true",
                    help="also time each run followed by a synchronisation (host + GPU, alternating rounds)")
    args = ap.parse_args()
    C = K = 8192
    rows = []
    print(f"{'dtype':6} {'M':>3} {'cuBLASLt ms':>12} {'skinny ms':>10} {'ratio':>6} {'W TB/s (skinny)':>16} "
          f"{'sync us cuBLASLt / skinny':>26}  kernels")
    for dtype, tf32 in [(torch.float32, 1), (torch.float32, 0), (torch.bfloat16, 1), (torch.float16, 1)]:
        name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "tf32" if tf32 else "fp32")
        g = torch.Generator().manual_seed(1)
        w = (torch.randn(C, K, generator=g) / math.sqrt(K)).to(DEV, dtype)
        b, gamma, beta = (torch.randn(C, generator=g).to(DEV) for _ in range(3))
        a = catalog.parse_attrs(GEMM, {"num_groups": 512, "post": "leaky_relu(0.01);mul(2)", "allow_tf32": tf32})
        for M in args.rows:
            x = torch.rand(M, K, generator=g).to(DEV, dtype)
            tensors = [x, w, b, gamma, beta]
            d, shape = abi.describe(abi.parse_attributes(GEMM, a),
                                    [abi.tensor_desc(t.dtype, tuple(t.shape)) for t in tensors])
            ptrs = [t.data_ptr() for t in tensors]
            out, plans, ys, wss = {}, {}, {}, {}
            for kind in (abi.GEMM_CUBLASLT, abi.GEMM_SKINNY):
                plan = abi.Plan(d, 0, abi.PlanOptions(gemm_kernel=kind))
                y = torch.empty(shape, dtype=dtype, device=DEV)
                ws = torch.empty(max(plan.workspace, 1), dtype=torch.uint8, device=DEV)
                out[kind] = (time_plan(plan, ptrs, y, ws, args.calls), y.clone(), plan.kernels)
                plans[kind], ys[kind], wss[kind] = plan, y, ws
            sync = sync_us(plans, ptrs, ys, wss) if args.sync else {}
            (t_lt, y_lt, k_lt), (t_sk, y_sk, k_sk) = out[abi.GEMM_CUBLASLT], out[abi.GEMM_SKINNY]
            diff = (y_lt.double() - y_sk.double()).abs().max().item()
            rate = w.numel() * w.element_size() / (t_sk * 1e-3) / 1e12
            sync_text = (f"{sync[abi.GEMM_CUBLASLT]:.1f} / {sync[abi.GEMM_SKINNY]:.1f}" if sync else "-")
            print(f"{name:6} {M:>3} {t_lt:>12.4f} {t_sk:>10.4f} {t_sk / t_lt:>6.3f} {rate:>16.2f} {sync_text:>26}  "
                  f"max|diff| {diff:.2g}; {k_sk.split(' [')[0]}")
            rows.append({"dtype": name, "M": M, "cublaslt_ms": t_lt, "skinny_ms": t_sk, "ratio": t_sk / t_lt,
                         "w_tb_per_s": rate, "max_abs_diff": diff, "cublaslt_kernels": k_lt, "skinny_kernels": k_sk,
                         "sync_us_cublaslt": sync.get(abi.GEMM_CUBLASLT), "sync_us_skinny": sync.get(abi.GEMM_SKINNY)})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
