"""Model 4's ConvTranspose + GELU + GroupNorm as one fused op (plugins/csrc/cuda/convt_gn.cu) against cuDNN (issue 13).

    python tools/convt_bench.py [--batches 1 16 128] [--json out.json] [--normalisers K ...]

For each batch and precision (tf32, bf16, fp32-accurate = 3xTF32 against cuDNN strict FP32): GPU time (median of CUDA
events over --iters runs after warm-up) and synchronous per-call wall time of
  fused      the plan of ConvTransposeGroupNormAct (kernels: convolution + statistics, finish, normalise in place)
  fused_ring  the same with the wgmma convolution's float32 X staged through the ring of raw chunks (cp.async)
             instead of registers (plan option convt_ring_producer; A/B; 16-bit X and 3xTF32 always take registers)
  fused_igemm3x  fp32-accurate on sm_90 only: 3xTF32 on the mma.sync kernel (forced; the planner runs wgmma there)
  fused_normK  with --normalisers K ...: the normaliser kernel of K blocks behind the wgmma convolution instead of
             the separate normalise pass (plan option convt_normalisers; A/B, measured slower on 2026-11-28)
  cudnn      F.conv_transpose2d alone (the convolution's floor in today's path)
  today      F.conv_transpose2d then the fused GELU + GroupNorm op (abi.groupnorm_act_cuda), today's ModelNew path
  eager      conv_transpose2d + F.gelu + F.group_norm
and the memory floor: X read once, Y written, read and written again (the fused scheme's traffic) at the copy
bandwidth measured in the same run. Accuracy at batch 2 (full 256 x 256): max |error| against float64 of the fused op
and of eager PyTorch at the same precision.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from fusedops import catalog
from fusedops.plugins import abi, convt_abi

CIN, COUT, HW, K, G = 64, 64, 256, 3, 8


def gpu_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def sync_ms(fn, iters):
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def copy_bandwidth():
    a = torch.empty(1 << 28, device="cuda")  # 1 GiB
    b = torch.empty_like(a)
    ms = gpu_ms(lambda: b.copy_(a), 10)
    return 2 * a.numel() * 4 / (ms * 1e-3)  # bytes/s, read + write


def setup(batch, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, CIN, HW, HW, generator=g).to("cuda", dtype)
    w = (torch.randn(CIN, COUT, K, K, generator=g) / (CIN * K * K) ** 0.5).to("cuda", dtype)
    b = (torch.randn(COUT, generator=g) * 0.1).cuda()
    gamma = (torch.rand(COUT, generator=g) + 0.5).cuda()
    beta = (torch.randn(COUT, generator=g) * 0.1).cuda()
    return x, w, b, gamma, beta


def run_precision(prec, batch, iters, attrs, rows, normalisers=()):
    dtype = torch.bfloat16 if prec == "bf16" else torch.float32
    strict = prec == "fp32-accurate"
    x, w, b, gamma, beta = setup(batch, dtype)
    plan = convt_abi.make_plan(x, w, attrs, torch.float32, allow_tf32=not strict)
    out = torch.empty(batch, COUT, HW + K - 1, HW + K - 1, dtype=dtype, device="cuda")
    bp = b.to(dtype)
    torch.backends.cudnn.allow_tf32 = not strict
    torch.backends.cuda.matmul.allow_tf32 = not strict
    # A/B of the wgmma kernel's producers: the same kernel staging X through the ring of raw chunks
    plan_ring = convt_abi.make_plan(x, w, attrs, torch.float32, abi.PlanOptions(convt_ring_producer=True),
                                   allow_tf32=not strict)
    # FP32-accurate on sm_90: the mma.sync kernel's 3xTF32 too, beside the planner's wgmma one
    plan_3x = convt_abi.make_plan(x, w, attrs, torch.float32, abi.PlanOptions(convt_kernel=abi.CONVT_IGEMM),
                                  allow_tf32=False) if strict and torch.cuda.get_device_capability() == (9, 0) else None
    plans_norm = {k: convt_abi.make_plan(x, w, attrs, torch.float32, abi.PlanOptions(convt_normalisers=k),
                                         allow_tf32=not strict) for k in normalisers}
    variants = {
        "fused": lambda: convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [], attrs, out=out,
                                                                    plan=plan),
        **{f"fused_norm{k}": (lambda p=p: convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [], attrs,
                                                                                out=out, plan=p))
           for k, p in plans_norm.items()},
        "fused_ring": lambda: convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [], attrs, out=out,
                                                                         plan=plan_ring),
        **({"fused_igemm3x": lambda: convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [], attrs, out=out,
                                                                            plan=plan_3x)} if plan_3x else {}),
        "cudnn": lambda: F.conv_transpose2d(x, w, bp),
        "today": lambda: abi.groupnorm_act_cuda(F.conv_transpose2d(x, w, bp), gamma.to(dtype), beta.to(dtype), [],
                                                attrs, out=out),
        "eager": lambda: F.group_norm(F.gelu(F.conv_transpose2d(x, w, bp)), G, gamma.to(dtype), beta.to(dtype)),
    }
    for name, fn in variants.items():
        g_ms = gpu_ms(fn, iters)
        s_ms = sync_ms(fn, iters)
        kernels = {"fused": plan.kernels, "fused_ring": plan_ring.kernels,
                   "fused_igemm3x": plan_3x.kernels if plan_3x else "",
                   **{f"fused_norm{k}": p.kernels for k, p in plans_norm.items()}}
        rows.append({"precision": prec, "batch": batch, "variant": name, "gpu_ms": round(g_ms, 4),
                     "sync_ms": round(s_ms, 4), "kernels": kernels.get(name, "")})
        print(f"{prec:14s} batch {batch:4d} {name:13s} gpu {g_ms:8.3f} ms  sync {s_ms:8.3f} ms", flush=True)
    del x, out
    torch.cuda.empty_cache()


def accuracy(prec, attrs):
    dtype = torch.bfloat16 if prec == "bf16" else torch.float32
    strict = prec == "fp32-accurate"
    x, w, b, gamma, beta = setup(2, dtype, seed=1)
    ref = catalog.group_norm_act_reference(F.conv_transpose2d(x.double(), w.double(), b.double()), gamma.double(),
                                           beta.double(), [], attrs)
    got = convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [], attrs, allow_tf32=not strict)
    torch.backends.cudnn.allow_tf32 = not strict
    eager = F.group_norm(F.gelu(F.conv_transpose2d(x, w, b.to(dtype))), G, gamma.to(dtype), beta.to(dtype))
    torch.backends.cudnn.allow_tf32 = True
    e_f = (got.double() - ref).abs().max().item()
    e_e = (eager.double() - ref).abs().max().item()
    print(f"accuracy {prec:14s}: fused max|err| {e_f:.3g}, eager {e_e:.3g}", flush=True)
    return {"precision": prec, "fused_max_abs_err": e_f, "eager_max_abs_err": e_e}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 128])
    ap.add_argument("--precisions", nargs="+", default=["tf32", "bf16", "fp32-accurate"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--normalisers", type=int, nargs="*", default=[],
                    help="also time the normaliser kernel behind the convolution with these block counts")
    a = ap.parse_args()
    attrs = catalog.parse_attrs("GroupNormAct", {"num_groups": G, "pre": "gelu"})
    bw = copy_bandwidth()
    rows, acc = [], []
    for prec in a.precisions:
        acc.append(accuracy(prec, attrs))
    for batch in a.batches:
        for prec in a.precisions:
            run_precision(prec, batch, a.iters, attrs, rows, a.normalisers)
        elements = batch * (CIN * HW * HW + 3 * COUT * (HW + K - 1) ** 2)
        print(f"memory floor batch {batch}: fp32 {elements * 4 / bw * 1e3:.3f} ms, bf16 {elements * 2 / bw * 1e3:.3f} "
              f"ms at {bw / 1e12:.2f} TB/s copy", flush=True)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_TBps": bw / 1e12,
              "rows": rows, "accuracy": acc,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
