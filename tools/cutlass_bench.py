"""Check, time and measure the accuracy of the CUTLASS GemmGroupNormAct kernel (GroupNorm in the GEMM's epilogue).

    python tools/cutlass_bench.py smoke [--quick] [--modes 3xtf32]  # every mode / configuration, small, vs float64
    python tools/cutlass_bench.py bench [--json F]     # models 1-3 at 1024 x 8192 x 8192: fused / cuBLAS GEMM alone
    python tools/cutlass_bench.py accuracy [--json F]  # 3xTF32 vs eager FP32 against float64, several K and inputs
    python tools/cutlass_bench.py profile [--model m1 --precision tf32 --config 1]  # 3 calls, for ncu
                                                       # (--precision fp32: the 3xTF32 kernel)

Timings: the call captured once in a CUDA graph and replayed (no Python / launch overhead), median of --iters CUDA
event timings after --warmup replays. The fused op runs through a plan of the C ABI (plugins/abi.py); "GEMM alone" is
torch.addmm (cuBLAS) in the same precision with the bias, into a preallocated output.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch

from fusedops import catalog
from fusedops.plugins import abi

GEMM = catalog.GEMM_GROUP_NORM_ACT.name
DEV = torch.device("cuda")
MODELS = {  # the reference models' fused nodes (tools/kernel_bench.py names)
    "m1": dict(num_groups=512, post="leaky_relu(0.01);mul(2)"),
    "m2": dict(num_groups=512, post="add(@0)", reduce="min"),
    "m3": dict(num_groups=256, pre="add(@0);hardtanh(-1,1);mish"),
}
CONFIGS = {"tf32": 3, "bf16": 3, "fp16": 1, "3xtf32": 3}  # CUTLASS configurations built per mode (gemm_choice.cpp)


def attrs(**kw) -> catalog.FusedAttrs:
    return catalog.parse_attrs(GEMM, kw)


class Fused:
    """A plan of the fused op for fixed tensors, callable (enqueue on the current stream). prepared: W split once
    (fusedops_plan_prepare_weights) and every call runs on that (3xTF32 plans)."""

    def __init__(self, tensors, a, options=None, prepared=False):
        descs = [abi.tensor_desc(t.dtype, tuple(t.shape)) for t in tensors]
        d, shape = abi.describe(abi.parse_attributes(GEMM, a), descs)
        self.plan = abi.Plan(d, DEV.index or 0, options)
        self.y = torch.full(shape, float("nan"), dtype=tensors[0].dtype, device=DEV)
        self.ws = torch.empty(max(self.plan.workspace, 1), dtype=torch.uint8, device=DEV)
        self.ptrs = [t.data_ptr() for t in tensors]
        self.prepared = None
        if prepared:
            assert self.plan.prepared_weights > 0, f"{self.plan.kernels} takes no prepared weights"
            self.prepared = torch.full((self.plan.prepared_weights,), 0xFF, dtype=torch.uint8, device=DEV)
            self.plan.prepare_weights(self.ptrs[1], self.prepared.data_ptr(), self.plan.prepared_weights,
                                      torch.cuda.current_stream().cuda_stream)

    def __call__(self):
        self.plan.run(self.ptrs, self.y.data_ptr(), self.ws.data_ptr(), self.plan.workspace,
                      torch.cuda.current_stream().cuda_stream,
                      None if self.prepared is None else self.prepared.data_ptr())
        return self.y


def time_ms(fn, iters: int, warmup: int) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(warmup):
        g.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for a, b in zip(starts, ends):
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends))


def host_us(fn, calls: int = 200) -> tuple[float, float]:
    """(enqueue, synchronous) microseconds a call: the host loop's time per call without waiting (plan.run through
    ctypes, for the CUTLASS kernel including the TMA descriptor encoding), and the median wall time of a call followed
    by a synchronisation (what a synchronous caller sees)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    walls = []
    for _ in range(50):
        a = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - a)
    return (t1 - t0) / calls * 1e6, statistics.median(walls) * 1e6


class matmul_precision:
    def __init__(self, p: str):
        self.p = p

    def __enter__(self):
        self.old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(self.p)

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.old)


def inputs(M, K, C, dtype, seed, kind="uniform"):
    """X like the models' torch.rand input, W like nn.Linear's init, per-channel parameters float32."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.rand(M, K, device=DEV, generator=g)
    bound = 1 / math.sqrt(K)
    w = (torch.rand(C, K, device=DEV, generator=g) * 2 - 1) * bound
    if kind == "large mean":
        x = x + 100.0
    elif kind == "wide range":
        x = x * torch.exp2(torch.randint(-12, 13, (M, K), device=DEV, generator=g).float())
        w = w * torch.exp2(torch.randint(-12, 13, (C, K), device=DEV, generator=g).float())
    b = (torch.rand(C, device=DEV, generator=g) * 2 - 1) * bound
    gamma = torch.rand(C, device=DEV, generator=g) + 0.5
    beta = torch.randn(C, device=DEV, generator=g) * 0.5
    e0 = torch.randn(C, device=DEV, generator=g)
    return [x.to(dtype), w.to(dtype), b, gamma, beta, e0]


def reference(t, a, rows):
    d = [u.detach().cpu().double() for u in t]
    return catalog.gemm_group_norm_act_reference(d[0][rows], d[1], d[2], d[3], d[4], d[5:], a)


def eager(t, a):
    x = t[0]
    cast = [u.to(x.dtype) for u in t[2:]]
    return catalog.gemm_group_norm_act_reference(x, t[1], cast[0], cast[1], cast[2], cast[3:], a)


def max_err(got, want) -> float:
    return (got.detach().cpu().double() - want).abs().max().item()


# ---------------------------------------------------------------------------------------------------------------------

def smoke(quick: bool = False, modes=None) -> int:
    """Every mode and configuration at a small size (partial tiles, a reduction, chains) against float64; quick: the
    default configuration of each mode, the first two cases."""
    failures = 0
    cases = [(300, 96, 320, 10, "add(@0);hardtanh(-1,1);mish", "", ""), (130, 64, 512, 16, "", "relu", "min"),
             (3, 32, 256, 256, "", "leaky_relu(0.01);mul(2)", "")]
    runs = [("tf32", torch.float32, 1, c) for c in range(1, CONFIGS["tf32"] + 1)]
    runs += [("bf16", torch.bfloat16, 1, c) for c in range(1, CONFIGS["bf16"] + 1)]
    runs += [("fp16", torch.float16, 1, 1)]
    runs += [("3xtf32", torch.float32, 0, c) for c in range(1, CONFIGS["3xtf32"] + 1)]
    runs += [("3xtf32", torch.float32, 0, "prepared")]  # W split once (fusedops_plan_prepare_weights)
    if quick:
        runs, cases = [r for r in runs if r[3] == 1], cases[:2]
    if modes:
        runs = [r for r in runs if r[0] in modes]
    for mode, dt, tf32, cfg in runs:
        prepared = cfg == "prepared"
        opts = abi.PlanOptions(gemm_kernel=abi.GEMM_CUTLASS, fp32_gemm=2, cutlass_config=1 if prepared else cfg)
        for M, K, C, G, pre, post, reduce in cases:
            t = inputs(M, K, C, dt, M + C)
            a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce, allow_tf32=tf32)
            f = Fused(t, a, opts, prepared)
            got = f()
            torch.cuda.synchronize()
            want = reference(t, a, slice(None))
            tol = {"tf32": 1e-2, "3xtf32": 2e-4}.get(mode, 6e-2 if dt == torch.bfloat16 else 1e-2)
            err = max_err(got, want)
            ok = err <= tol and not torch.isnan(got).any().item() and f.plan.kernels.startswith("cutlass_gn_gemm(")
            failures += not ok
            print(f"[smoke] {mode:6s} cfg {cfg} {M}x{K}x{C} G={G} {pre}|{post}|{reduce}: max err {err:.2e} "
                  f"{'ok' if ok else 'FAIL'}  {f.plan.kernels.split(' [')[0]}")
    print(f"[smoke] {failures} failure(s)")
    return 1 if failures else 0


def bench(iters: int, warmup: int, precisions=("tf32", "bf16", "fp16", "fp32")) -> dict:
    M, K, C = 1024, 8192, 8192
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [M, K, C]}
    rows = []
    for prec, dt in [("tf32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", None)]:
        if prec not in precisions:
            continue
        dtype = dt or torch.float32
        t = inputs(M, K, C, dtype, 1)
        x, w, b = t[0], t[1], t[2].to(dtype)
        z = torch.empty(M, C, device=DEV, dtype=dtype)
        with matmul_precision("highest" if prec == "fp32" else "high"):
            gemm = time_ms(lambda: torch.addmm(b, x, w.t(), out=z), iters, warmup)
            for name, kw in MODELS.items():
                r = {"precision": prec, "model": name, "gemm_alone_ms": round(gemm, 4)}
                if prec == "fp32":
                    a = attrs(allow_tf32=0, **kw)
                    r["eager_ms"] = round(time_ms(lambda: eager(t, a), iters, warmup), 4)
                    strict = Fused(t, a, abi.PlanOptions(fp32_gemm=1))
                    r["fused_strict_cublaslt_ms"] = round(time_ms(strict, iters, warmup), 4)
                    f3 = Fused(t, a, abi.PlanOptions(fp32_gemm=2))
                    r["fused_3xtf32_ms"] = round(time_ms(f3, iters, warmup), 4)
                    r["kernels_3xtf32"] = f3.plan.kernels.split(" [")[0]
                    want = f3()
                    fp = Fused(t, a, abi.PlanOptions(fp32_gemm=2), prepared=True)  # W split once
                    r["fused_3xtf32_prepared_ms"] = round(time_ms(fp, iters, warmup), 4)
                    r["prepared_bit_equal"] = bool(torch.equal(fp(), want))
                    del fp
                    for cfg in range(1, CONFIGS["3xtf32"] + 1):  # the mainloop schedules: same sums, bit for bit
                        f = Fused(t, a, abi.PlanOptions(fp32_gemm=2, cutlass_config=cfg))
                        r[f"cfg{cfg}_ms"] = round(time_ms(f, iters, warmup), 4)
                        r[f"cfg{cfg}"] = f.plan.kernels.split(",")[1]
                        r[f"cfg{cfg}_bit_equal"] = bool(torch.equal(f(), want))
                        if f.plan.prepared_weights:  # the configuration's twin on prepared weights
                            del f
                            f = Fused(t, a, abi.PlanOptions(fp32_gemm=2, cutlass_config=cfg), prepared=True)
                            r[f"cfg{cfg}_prepared_ms"] = round(time_ms(f, iters, warmup), 4)
                            r[f"cfg{cfg}_prepared_bit_equal"] = bool(torch.equal(f(), want))
                        del f
                else:
                    a = attrs(allow_tf32=1, **kw)
                    auto = Fused(t, a)
                    r["fused_ms"] = round(time_ms(auto, iters, warmup), 4)
                    r["kernels"] = auto.plan.kernels.split(" [")[0]
                    r["fused_over_gemm"] = round(r["fused_ms"] / gemm, 4)
                    old = Fused(t, a, abi.PlanOptions(gemm_kernel=1))
                    r["cublaslt_path_ms"] = round(time_ms(old, iters, warmup), 4)
                    r["enqueue_us"], r["sync_call_us"] = (round(v, 1) for v in host_us(auto))
                    r["cublaslt_enqueue_us"], r["cublaslt_sync_call_us"] = (round(v, 1) for v in host_us(old))
                    for cfg in range(1, CONFIGS[prec] + 1):
                        f = Fused(t, a, abi.PlanOptions(gemm_kernel=2, cutlass_config=cfg))
                        r[f"cfg{cfg}_ms"] = round(time_ms(f, iters, warmup), 4)
                        r[f"cfg{cfg}"] = f.plan.kernels.split(",")[1]
                rows.append(r)
                print(json.dumps(r), flush=True)
        del t, x, w, z
        torch.cuda.empty_cache()
    res["rows"] = rows
    print("\nprecision model  GEMM alone  fused    fused/GEMM  cuBLASLt+epi  configs 1/2/3 (ms)   enqueue / sync call us"
          " (cuBLASLt path)")
    for r in rows:
        if r["precision"] == "fp32":
            print(f"fp32      {r['model']}     {r['gemm_alone_ms']:.4f}    strict {r['fused_strict_cublaslt_ms']:.4f}"
                  f"  3xTF32 {r['fused_3xtf32_ms']:.4f}  eager {r['eager_ms']:.4f}  3xTF32 on prepared W "
                  f"{r['fused_3xtf32_prepared_ms']:.4f}{'' if r['prepared_bit_equal'] else ' NOT bit-equal'}")
            for c in range(1, CONFIGS["3xtf32"] + 1):
                prep = "" if f"cfg{c}_prepared_ms" not in r else \
                    f"  prepared W {r[f'cfg{c}_prepared_ms']:.4f} ms" + \
                    ("" if r[f"cfg{c}_prepared_bit_equal"] else " NOT bit-equal")
                print(f"          3xTF32 config {c} {r[f'cfg{c}']:50s} {r[f'cfg{c}_ms']:.4f} ms"
                      f"{'' if r[f'cfg{c}_bit_equal'] else '  NOT bit-equal to the default'}{prep}")
        else:
            def cfg_text(c):
                extra = [f"{k} {r[f'cfg{c}_{k}_ms']:.4f}" for k in ("quads", "store_only") if f"cfg{c}_{k}_ms" in r]
                return f"{r[f'cfg{c}_ms']:.4f}" + (f" ({', '.join(extra)})" if extra else "")
            cfgs = " / ".join(cfg_text(c) for c in range(1, CONFIGS[r["precision"]] + 1))
            print(f"{r['precision']:9s} {r['model']}     {r['gemm_alone_ms']:.4f}    {r['fused_ms']:.4f}   "
                  f"{r['fused_over_gemm']:.3f}       {r['cublaslt_path_ms']:.4f}        {cfgs}   "
                  f"{r['enqueue_us']} / {r['sync_call_us']} ({r['cublaslt_enqueue_us']} / {r['cublaslt_sync_call_us']})")
    return res


def profile(model: str, prec: str, config: int, calls: int, prepared: bool = False) -> int:
    """A few calls of one forced configuration, for ncu (--launch-skip 1 --launch-count 1 -k regex:device_kernel)."""
    M, K, C = 1024, 8192, 8192
    dtype = {"tf32": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[prec]
    t = inputs(M, K, C, dtype, 1)
    three = prec == "fp32"  # strict float32 through the 3xTF32 kernel (it has one configuration)
    options = abi.PlanOptions(gemm_kernel=2, fp32_gemm=2, cutlass_config=config) if three else \
        abi.PlanOptions(gemm_kernel=2, cutlass_config=config)
    f = Fused(t, attrs(allow_tf32=0 if three else 1, **MODELS[model]), options, prepared)
    for _ in range(calls):
        f()
    torch.cuda.synchronize()
    print(f"profile: {model} {prec}: {f.plan.kernels}")
    return 0


def accuracy(prepared_config: int = 0) -> dict:
    """Max |y - float64| of the fused 3xTF32 op, eager FP32 (cuBLAS strict), the fused strict-FP32 (cuBLASLt) path and
    fused TF32, on 128 sampled rows of M = 1024 x C = 8192, for the three models, K in 1024..8192, three input
    kinds. The verdict: is 3xTF32 at least as accurate as eager FP32 on every case. prepared_config k > 0: also the
    3xTF32 kernel on prepared weights of configuration k (its twin), in the verdict too."""
    M, C = 1024, 8192
    rows = torch.arange(0, M, M // 128)
    out: dict = {"cases": []}
    worse = []
    print("\nmodel K     inputs      3xTF32    eager FP32  strict fused  TF32 fused   3xTF32/eager"
          + (f"  prepared cfg {prepared_config}/eager" if prepared_config else ""))
    for K in (1024, 2048, 4096, 8192):
        for kind in ("uniform", "large mean", "wide range"):
            t = inputs(M, K, C, torch.float32, K + len(kind), kind)
            for name, kw in MODELS.items():
                a = attrs(allow_tf32=0, **kw)
                want = reference(t, a, rows)
                e3 = max_err(Fused(t, a, abi.PlanOptions(fp32_gemm=2))()[rows], want)
                with matmul_precision("highest"):
                    ee = max_err(eager(t, a)[rows], want)
                es = max_err(Fused(t, a, abi.PlanOptions(fp32_gemm=1))()[rows], want)
                et = max_err(Fused(t, attrs(allow_tf32=1, **kw))()[rows], want)
                c = {"model": name, "K": K, "inputs": kind, "err_3xtf32": e3, "err_eager_fp32": ee,
                     "err_fused_strict": es, "err_fused_tf32": et}
                extra = ""
                if prepared_config:
                    opts = abi.PlanOptions(fp32_gemm=2, cutlass_config=prepared_config)
                    c["err_3xtf32_prepared"] = ep = max_err(Fused(t, a, opts, prepared=True)()[rows], want)
                    extra = f"     {ep / max(ee, 1e-30):.2f}"
                out["cases"].append(c)
                if max(e3, c.get("err_3xtf32_prepared", 0.0)) > ee:
                    worse.append(c)
                print(f"{name}    {K:<5d} {kind:11s} {e3:.2e}  {ee:.2e}    {es:.2e}      {et:.2e}     "
                      f"{e3 / max(ee, 1e-30):.2f}{extra}", flush=True)
            del t
            torch.cuda.empty_cache()
    out["3xtf32_at_least_as_accurate_as_eager_fp32"] = not worse
    worst = max((max(c["err_3xtf32"], c.get("err_3xtf32_prepared", 0.0)) / max(c["err_eager_fp32"], 1e-30)
                 for c in worse), default=0.0)
    print(f"\n3xTF32 at least as accurate as eager FP32 on every case: {'yes' if not worse else 'NO'}"
          + ("" if not worse else f" ({len(worse)} cases worse, worst ratio {worst:.2f})"))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["smoke", "bench", "accuracy", "profile"])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--iters", type=int, default=25)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smoke: the default configuration of each mode only")
    p.add_argument("--modes", nargs="+", choices=sorted(CONFIGS), help="smoke: these modes only")
    p.add_argument("--model", default="m1", choices=sorted(MODELS), help="profile: the model")
    p.add_argument("--precision", default="tf32", choices=["tf32", "bf16", "fp16", "fp32"],
                   help="profile: the precision (fp32: 3xTF32)")
    p.add_argument("--config", type=int, default=1, help="profile: the tile configuration (1-based)")
    p.add_argument("--prepared", action="store_true", help="profile: 3xTF32 on W split once (prepared weights)")
    p.add_argument("--prepared-config", type=int, default=0,
                   help="accuracy: also the prepared-weights twin of this 3xTF32 configuration (1-based)")
    p.add_argument("--precisions", nargs="+", default=["tf32", "bf16", "fp16", "fp32"],
                   choices=["tf32", "bf16", "fp16", "fp32"], help="bench: the precisions to time")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("cutlass_bench: needs a CUDA device", file=sys.stderr)
        return 2
    if not abi.has_cutlass():
        print("cutlass_bench: libfusedops was built without the CUTLASS kernels", file=sys.stderr)
        return 2
    if args.what == "smoke":
        return smoke(args.quick, args.modes)
    if args.what == "profile":
        return profile(args.model, args.precision, args.config, 3, args.prepared)
    res = bench(args.iters, args.warmup, args.precisions) if args.what == "bench" else accuracy(args.prepared_config)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
