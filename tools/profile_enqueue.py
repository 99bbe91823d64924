"""Where the host time of one fused-op call goes (GPU machine): per-call enqueue time of the op through each layer
(the Python wrapper, the raw OpOverload, inference_mode vs no_grad) and a torch.profiler CPU breakdown.

    python tools/profile_enqueue.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fusedops.models import get_entry
from fusedops.plugins import torch_ops


def enqueue_us(fn, calls: int) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    ts = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if i % 256 == 255:  # keep the launch queue short: only host time is measured
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(ts) * 1e6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=2000)
    a = p.parse_args()
    torch.set_float32_matmul_precision("high")
    gn_op, gemm_op = torch_ops.load()
    for key in ("1", "2", "3"):
        e = get_entry(key)
        new = e.build("bench", cls_name="ModelNew").cuda()
        lin = next(m for m in new.modules() if isinstance(m, torch.nn.Linear))
        gn = next(m for m in new.modules() if isinstance(m, torch.nn.GroupNorm))
        x = torch.rand(1, lin.in_features, device="cuda")
        args = (x, lin.weight, lin.bias, gn.weight, gn.bias, [], gn.num_groups, gn.eps, "", "", "", 1, -1)
        rows = []
        for mode, ctx in (("inference_mode", torch.inference_mode), ("no_grad", torch.no_grad)):
            with ctx():
                rows.append((f"wrapper {mode}", enqueue_us(lambda: torch_ops.gemm_group_norm_act(*args), a.calls)))
                rows.append((f"OpOverload {mode}", enqueue_us(lambda: gemm_op(*args), a.calls)))
                rows.append((f"torch.empty(out)+empty(ws) {mode}", enqueue_us(
                    lambda: (torch.empty(1, lin.out_features, device="cuda"),
                             torch.empty(8 << 20, dtype=torch.uint8, device="cuda")), a.calls)))
                rows.append((f"F.linear alone {mode}", enqueue_us(lambda: torch.nn.functional.linear(
                    x, lin.weight, lin.bias), a.calls)))
        print(f"== model {key}: host time per call, median us (batch 1, tf32)")
        for name, us in rows:
            print(f"  {name:45s} {us:8.2f}")
        with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(200):
                gemm_op(*args)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
