"""Kernel-level harness for the CUDA entries of libfusedops (plugins/abi.py), llm.c style: check, then time.

    python tools/kernel_bench.py smoke            # one small run of every kernel path, checked (sanitizer target)
    python tools/kernel_bench.py bench [--json F] # model 4's GELU+GroupNorm step and the three GEMM models' fused ops
    python tools/kernel_bench.py ab [--json F]    # old vs new kernel variants side by side (plan options), + accuracy
    python tools/kernel_bench.py rows [--json F]  # the GEMM epilogue alone at each epilogue_rows (1..16), TF32 / BF16

Timings: CUDA events around each call, median of --iters after --warmup calls, inputs allocated once.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F

from fusedops import catalog
from fusedops.plugins import abi


def attrs(op="GroupNormAct", **kw):
    return catalog.parse_attrs(op, kw)


def smoke() -> int:
    """Every kernel path once at a small size, compared with the float64 reference (exit 1 on mismatch)."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(0)
    failures = 0

    def check(name, got, want, tol):
        nonlocal failures
        err = (got.detach().cpu().double() - want).abs().max().item()
        ok = err <= tol and not torch.isnan(got).any().item()
        failures += not ok
        print(f"[smoke] {name:40s} max err {err:.2e} {'ok' if ok else 'FAIL'}")

    gn_cases = [  # (shape, G, pre, post, reduce): row vec / row scalar / fused / split / split+reduce / 16-bit
        ((6, 64), 8, "add(@0)", "leaky_relu(0.01);mul(2)", "", torch.float32),
        ((5, 21), 7, "", "relu", "min", torch.float32),
        ((3, 16, 9, 11), 4, "gelu", "", "", torch.float32),
        ((2, 8, 64, 64), 2, "gelu", "tanh", "", torch.float32),
        ((2, 8, 2049), 2, "mish", "", "logsumexp", torch.float32),
        ((2, 8, 64, 64), 2, "gelu", "", "", torch.bfloat16),
        ((2, 8, 30, 30), 2, "gelu", "", "", torch.bfloat16),  # S % 8 == 4: half-width (8-byte) vectors
        ((2, 8, 30, 31), 2, "gelu", "", "", torch.float32),   # S % 4 == 2: half-width (8-byte) vectors
        ((4, 32), 4, "", "silu", "sum", torch.float16),
    ]
    for shape, G, pre, post, reduce, dt in gn_cases:
        x = (torch.randn(*shape, generator=g) * 2).to(dev, dt)
        C = shape[1]
        gamma, beta, e0 = [(torch.rand(C, generator=g) + 0.5).to(dev) for _ in range(3)]
        a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
        out = torch.full(catalog.output_shape("GroupNormAct", shape, a), float("nan"), device=dev, dtype=dt)
        abi.groupnorm_act_cuda(x, gamma, beta, [e0], a, out=out)
        want = catalog.group_norm_act_reference(x.cpu().double(), gamma.cpu().double(), beta.cpu().double(),
                                                [e0.cpu().double()], a)
        check(f"gn {shape} {pre}|{post}|{reduce} {dt}", out, want, 1e-4 if dt == torch.float32 else 5e-2)

    for M, K, C, G, reduce, dt, tf32 in [(8, 64, 128, 16, "", torch.float32, 0), (8, 64, 128, 16, "min",
                                                                                   torch.float32, 1),
                                         (5, 40, 63, 21, "", torch.float32, 0), (8, 64, 128, 8, "", torch.bfloat16, 1),
                                         (4, 32, 65536, 64, "", torch.float32, 0)]:
        x = torch.rand(M, K, generator=g).to(dev, dt)
        w = (torch.randn(C, K, generator=g) / math.sqrt(K)).to(dev, dt)
        b, gamma, beta = [(torch.rand(C, generator=g) + 0.5).to(dev) for _ in range(3)]
        a = attrs("GemmGroupNormAct", num_groups=G, post="gelu", reduce=reduce, allow_tf32=tf32)
        out = torch.full(catalog.output_shape("GemmGroupNormAct", (M, K), a, (C, K)), float("nan"), device=dev,
                         dtype=dt)
        abi.gemm_groupnorm_act_cuda(x, w, b, gamma, beta, [], a, tf32, out=out)
        want = catalog.gemm_group_norm_act_reference(x.cpu().double(), w.cpu().double(), b.cpu().double(),
                                                     gamma.cpu().double(), beta.cpu().double(), [], a)
        tol = 1e-4 if dt == torch.float32 and not tf32 else 5e-2
        check(f"gemm {M}x{K}x{C} G={G} {reduce} {dt} tf32={tf32}", out, want, tol)
    torch.cuda.synchronize()
    print(f"[smoke] {'all ok' if failures == 0 else f'{failures} FAILED'}")
    return 1 if failures else 0


GEMM_CHAINS = {  # the three GEMM reference models' fused chains
    "m1_leakyrelu_x2": dict(num_groups=512, post="leaky_relu(0.01);mul(2)"),
    "m2_min_biasadd": dict(num_groups=512, post="add(@0)", reduce="min"),
    "m3_hardtanh_mish": dict(num_groups=256, pre="add(@0);hardtanh(-1,1);mish"),
}


def gemm_inputs(M: int, K: int, C: int, dt: torch.dtype, g: torch.Generator):
    """X, W, bias, gamma, beta, one per-channel extra and an (M, C) buffer on the GPU, in dtype dt."""
    dev = torch.device("cuda")
    xg = torch.rand(M, K, device=dev, generator=g).to(dt)
    wg = (torch.randn(C, K, device=dev, generator=g) / math.sqrt(K)).to(dt)
    bg = torch.randn(C, device=dev, generator=g).to(dt)
    gam = (torch.rand(C, device=dev, generator=g) + 0.5).to(dt)
    bet = torch.randn(C, device=dev, generator=g).to(dt)
    e0 = torch.randn(C, device=dev, generator=g).to(dt)
    return xg, wg, bg, gam, bet, e0, torch.empty(M, C, device=dev, dtype=dt)


def model4_inputs(g: torch.Generator):
    """Model 4's ConvTranspose2d output (128, 64, 258, 258) float32 (2.2 GB), gamma, beta and an output buffer."""
    dev = torch.device("cuda")
    x = torch.randn(128, 64, 258, 258, device=dev, generator=g)
    gamma = torch.rand(64, device=dev, generator=g) + 0.5
    beta = torch.randn(64, device=dev, generator=g)
    return x, gamma, beta, torch.empty_like(x)


def time_ms(fn, iters: int, warmup: int, graph: bool = False) -> float:
    """Median CUDA-event time of fn. graph=True: fn captured once into a CUDA graph and replayed, which removes the
    Python/ctypes launch overhead (~60 us a call) that otherwise hides kernels shorter than that."""
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        fn = g.replay
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


class matmul_precision:
    def __init__(self, tf32: bool):
        self.tf32 = tf32

    def __enter__(self):
        self.old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.old)


def bench(iters: int, warmup: int) -> dict:
    dev = torch.device("cuda")
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "iters": iters}
    g = torch.Generator(device=dev).manual_seed(0)

    # ---- model 4: GELU + GroupNorm on the ConvTranspose2d output (128, 64, 258, 258) float32, G = 8 ----
    x, gamma, beta, y = model4_inputs(g)
    a = attrs(num_groups=8, pre="gelu")
    a_plain = attrs(num_groups=8)
    nbytes = x.numel() * 4
    r = {
        "copy_ms": time_ms(lambda: y.copy_(x), iters, warmup),
        "fused_gelu_gn_ms": time_ms(lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a, out=y), iters, warmup),
        "fused_gn_only_ms": time_ms(lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a_plain, out=y), iters,
                                    warmup),
        "fused_interpreted_chain_ms": time_ms(  # "gelu;mul(1)": same result through the generic chain interpreter
            lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], attrs(num_groups=8, pre="gelu;mul(1)"), out=y),
            iters, warmup),
        "eager_gelu_gn_ms": time_ms(lambda: F.group_norm(F.gelu(x), 8, gamma, beta, 1e-5), iters, warmup),
    }
    # SPLIT path wave size: fraction of L2 that one wave's X may fill (0 = all groups in one launch).
    r["fused_gelu_gn_graph_ms"] = time_ms(lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a, out=y), iters, warmup,
                                          graph=True)
    for frac in (0.5,):
        waves = abi.PlanOptions(groupnorm_two_pass=True, l2_wave_fraction=frac)
        r[f"fused_gelu_gn_ms_l2frac_{frac}"] = time_ms(
            lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a, out=y, options=waves), iters, warmup)
        r[f"fused_gn_only_ms_l2frac_{frac}"] = time_ms(
            lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a_plain, out=y, options=waves), iters, warmup)
    r["floor_ms_at_copy_bw"] = r["copy_ms"] * 1.5  # 2 reads + 1 write vs the copy's 1 read + 1 write
    r["fused_effective_TBps"] = 3 * nbytes / r["fused_gelu_gn_ms"] / 1e9
    r["copy_TBps"] = 2 * nbytes / r["copy_ms"] / 1e9
    abi.groupnorm_act_cuda(x, gamma, beta, [], a, out=y)
    eager = F.group_norm(F.gelu(x), 8, gamma, beta, 1e-5)
    r["max_abs_diff_vs_eager"] = (y - eager).abs().max().item()
    res["model4_gelu_groupnorm"] = r
    print(json.dumps({"model4_gelu_groupnorm": r}, indent=1), flush=True)
    del x, y, eager

    # ---- GEMM models: 1024 x 8192 @ (8192 x 8192)^T ----
    M, K, C = 1024, 8192, 8192
    chains = GEMM_CHAINS
    for prec, dt, tf32 in [("tf32", torch.float32, 1), ("bf16", torch.bfloat16, 1), ("fp32", torch.float32, 0)]:
        it = max(5, iters // 4) if prec == "fp32" else iters
        xg, wg, bg, gam, bet, e0, z = gemm_inputs(M, K, C, dt, g)
        rp: dict = {}
        with matmul_precision(bool(tf32)):
            rp["cublas_linear_ms"] = time_ms(lambda: torch.addmm(bg, xg, wg.t(), out=z), it, warmup)
            rp["cublas_mm_nobias_ms"] = time_ms(lambda: torch.mm(xg, wg.t(), out=z), it, warmup)
            rp["cublas_linear_graph_ms"] = time_ms(lambda: torch.addmm(bg, xg, wg.t(), out=z), it, warmup, graph=True)
            for name, kw in chains.items():
                af = attrs("GemmGroupNormAct", allow_tf32=tf32, **kw)
                ag = attrs("GroupNormAct", **kw)
                out = torch.empty(catalog.output_shape("GemmGroupNormAct", (M, K), af, (C, K)), device=dev, dtype=dt)
                out_e = torch.empty(catalog.output_shape("GroupNormAct", (M, C), ag), device=dev, dtype=dt)
                fused = time_ms(lambda: abi.gemm_groupnorm_act_cuda(xg, wg, bg, gam, bet, [e0], af, tf32, out=out),
                                it, warmup)
                fused_g = time_ms(lambda: abi.gemm_groupnorm_act_cuda(xg, wg, bg, gam, bet, [e0], af, tf32, out=out),
                                  it, warmup, graph=True)
                epi = time_ms(lambda: abi.groupnorm_act_cuda(z, gam, bet, [e0], ag, out=out_e), iters, warmup,
                              graph=True)

                def eager_fn(af=af, kw=kw):
                    zz = F.linear(xg, wg, bg)
                    zz = catalog.apply_chain(zz, af.pre, [e0])
                    zz = F.group_norm(zz, kw["num_groups"], gam, bet, 1e-5)
                    return catalog.apply_reduce(catalog.apply_chain(zz, af.post, [e0]), af.reduce)

                eager = time_ms(eager_fn, it, warmup)
                abi.gemm_groupnorm_act_cuda(xg, wg, bg, gam, bet, [e0], af, tf32, out=out)
                diff = (out.float() - eager_fn().float()).abs().max().item()
                rp[name] = {"fused_ms": fused, "fused_graph_ms": fused_g, "epilogue_alone_graph_ms": epi,
                            "eager_ms": eager, "fused_over_cublas_linear": fused / rp["cublas_linear_ms"],
                            "fused_graph_over_cublas_graph": fused_g / rp["cublas_linear_graph_ms"],
                            "max_abs_diff_vs_eager": diff}
        res[f"gemm_{prec}"] = rp
        print(json.dumps({f"gemm_{prec}": rp}, indent=1), flush=True)
        del xg, wg, z
        torch.cuda.empty_cache()
    return res


def ab(iters: int, warmup: int) -> dict:
    """Old and new kernel versions in one process, chosen through plan options (abi.PlanOptions): model 4 GELU with
    erff (gelu_erff) vs gelu_fast, accuracy of both against a float64 GPU reference; the GEMM epilogue: one-row
    register kernel (epilogue_register) vs the column-slice kernel at several epilogue_rows and at its default."""
    dev = torch.device("cuda")
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "iters": iters}
    g = torch.Generator(device=dev).manual_seed(0)

    x, gamma, beta, y = model4_inputs(g)
    a, a_plain = attrs(num_groups=8, pre="gelu"), attrs(num_groups=8)
    r: dict = {"copy_ms": time_ms(lambda: y.copy_(x), iters, warmup)}
    r["gn_only_ms"] = time_ms(lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a_plain, out=y), iters, warmup)
    two_pass = abi.PlanOptions(groupnorm_two_pass=True)
    r["gn_only_twopass_ms"] = time_ms(lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a_plain, out=y,
                                                                     options=two_pass), iters, warmup)
    ref = F.group_norm(F.gelu(x.double()), 8, gamma.double(), beta.double(), 1e-5)
    eager = F.group_norm(F.gelu(x), 8, gamma, beta, 1e-5)
    r["eager_fp32_max_abs_err_vs_f64"] = (eager.double() - ref).abs().max().item()
    del eager
    variants = (("twopass_erff", abi.PlanOptions(gelu_erff=True, groupnorm_two_pass=True)),
                ("twopass_fast", abi.PlanOptions(groupnorm_two_pass=True)), ("onepass_fast", None))
    for name, opts in variants:
        r[f"gelu_gn_{name}_ms"] = time_ms(lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a, out=y, options=opts),
                                          iters, warmup)
        r[f"gelu_gn_{name}_graph_ms"] = time_ms(
            lambda: abi.groupnorm_act_cuda(x, gamma, beta, [], a, out=y, options=opts), iters, warmup, graph=True)
        y.fill_(float("nan"))
        abi.groupnorm_act_cuda(x, gamma, beta, [], a, out=y, options=opts)
        r[f"gelu_gn_{name}_max_abs_err_vs_f64"] = (y.double() - ref).abs().max().item()
    r["floor_ms_at_copy_bw"] = r["copy_ms"] * 1.5
    del y, ref
    # bfloat16 (S = 258 * 258 is 4 mod 8: the half-width vector path): fused vs eager, error vs float64 of its input
    xb = x.to(torch.bfloat16)
    del x
    yb = torch.empty_like(xb)
    gb, bb = gamma.to(torch.bfloat16), beta.to(torch.bfloat16)
    r["bf16_copy_ms"] = time_ms(lambda: yb.copy_(xb), iters, warmup)
    r["bf16_gelu_gn_onepass_ms"] = time_ms(lambda: abi.groupnorm_act_cuda(xb, gb, bb, [], a, out=yb), iters, warmup)
    r["bf16_gelu_gn_twopass_ms"] = time_ms(lambda: abi.groupnorm_act_cuda(xb, gb, bb, [], a, out=yb,
                                                                          options=two_pass), iters, warmup)
    r["bf16_eager_ms"] = time_ms(lambda: F.group_norm(F.gelu(xb), 8, gb, bb, 1e-5), iters, warmup)
    yb.fill_(float("nan"))
    abi.groupnorm_act_cuda(xb, gb, bb, [], a, out=yb)
    ref_b = F.group_norm(F.gelu(xb[:8].double()), 8, gb.double(), bb.double(), 1e-5)
    r["bf16_fused_max_abs_err_vs_f64_first8"] = (yb[:8].double() - ref_b).abs().max().item()
    r["bf16_eager_max_abs_err_vs_f64_first8"] = (F.group_norm(F.gelu(xb[:8]), 8, gb, bb, 1e-5).double()
                                                 - ref_b).abs().max().item()
    res["model4_gelu_groupnorm"] = r
    print(json.dumps({"model4_gelu_groupnorm": r}, indent=1), flush=True)
    del xb, yb, ref_b
    torch.cuda.empty_cache()

    M, K, C = 1024, 8192, 8192
    chains = GEMM_CHAINS
    variants = [("reg", abi.PlanOptions(epilogue_register=True))] + \
        [(f"tile_r{n}", abi.PlanOptions(epilogue_rows=n)) for n in (2, 4, 8)] + [("tile_default", None)]
    for prec, dt, tf32 in [("tf32", torch.float32, 1), ("bf16", torch.bfloat16, 1)]:
        xg, wg, bg, gam, bet, e0, z = gemm_inputs(M, K, C, dt, g)
        rp: dict = {}
        with matmul_precision(bool(tf32)):
            rp["cublas_linear_graph_ms"] = time_ms(lambda: torch.addmm(bg, xg, wg.t(), out=z), iters, warmup,
                                                   graph=True)
            for name, kw in chains.items():
                af = attrs("GemmGroupNormAct", allow_tf32=tf32, **kw)
                ag = attrs("GroupNormAct", **kw)
                out = torch.empty(catalog.output_shape("GemmGroupNormAct", (M, K), af, (C, K)), device=dev, dtype=dt)
                out_e = torch.empty(catalog.output_shape("GroupNormAct", (M, C), ag), device=dev, dtype=dt)
                zz = F.linear(xg, wg, bg)
                zz = catalog.apply_chain(zz, af.pre, [e0])
                zz = F.group_norm(zz, kw["num_groups"], gam, bet, 1e-5)
                want = catalog.apply_reduce(catalog.apply_chain(zz, af.post, [e0]), af.reduce).float()
                rm: dict = {}
                for vname, opts in variants:
                    fused_g = time_ms(lambda: abi.gemm_groupnorm_act_cuda(xg, wg, bg, gam, bet, [e0], af, tf32,
                                                                          out=out, options=opts),
                                      iters, warmup, graph=True)
                    epi = time_ms(lambda: abi.groupnorm_act_cuda(z, gam, bet, [e0], ag, out=out_e, options=opts),
                                  iters, warmup, graph=True)
                    out.fill_(float("nan"))
                    abi.gemm_groupnorm_act_cuda(xg, wg, bg, gam, bet, [e0], af, tf32, out=out, options=opts)
                    diff = (out.float() - want).abs().max().item()
                    rm[vname] = {"fused_graph_ms": round(fused_g, 4), "epilogue_graph_us": round(epi * 1000, 1),
                                 "fused_over_cublas": round(fused_g / rp["cublas_linear_graph_ms"], 3),
                                 "max_abs_diff_vs_eager": diff}
                rp[name] = rm
        res[f"gemm_{prec}"] = rp
        print(json.dumps({f"gemm_{prec}": rp}, indent=1), flush=True)
        del xg, wg, z
        torch.cuda.empty_cache()
    return res


def rows_sweep(iters: int, warmup: int) -> dict:
    """The three GEMM models' epilogue kernel alone (GroupNormAct on the (1024, 8192) GEMM output, CUDA-graph replay)
    at every epilogue_rows the column-slice kernel takes, next to the plan's default and a same-size copy: how many
    rows a block should walk (the rule is gn_plan.cu's tile_rows)."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "iters": iters}
    for prec, dt in [("tf32", torch.float32), ("bf16", torch.bfloat16)]:
        z = torch.randn(1024, 8192, device=dev, generator=g).to(dt)
        gam, bet, e0 = [(torch.rand(8192, device=dev, generator=g) + 0.5).to(dt) for _ in range(3)]
        zc = torch.empty_like(z)
        rp: dict = {"copy_graph_us": round(1000 * time_ms(lambda: zc.copy_(z), iters, warmup, graph=True), 1)}
        for name, kw in GEMM_CHAINS.items():
            a = attrs(**kw)
            out = torch.empty(catalog.output_shape("GroupNormAct", tuple(z.shape), a), device=dev, dtype=dt)
            want = None
            row: dict = {}
            for n in [None] + list(range(1, 17)):
                opts = None if n is None else abi.PlanOptions(epilogue_rows=n)
                us = 1000 * time_ms(lambda: abi.groupnorm_act_cuda(z, gam, bet, [e0], a, out=out, options=opts),
                                    iters, warmup, graph=True)
                out.fill_(float("nan"))
                abi.groupnorm_act_cuda(z, gam, bet, [e0], a, out=out, options=opts)
                if want is None:
                    want = out.clone()
                row["default" if n is None else f"r{n}"] = round(us, 1)
                assert torch.equal(out, want), f"{prec} {name} rows={n}: not the default plan's bits"
            rp[name] = row
            print(prec, name, f"copy={rp['copy_graph_us']}", " ".join(f"{k}={v}" for k, v in row.items()),
                  flush=True)
        res[prec] = rp
        del z, zc
        torch.cuda.empty_cache()
    return res


def profile() -> int:
    """One call of each hot kernel for Nsight Compute: the three GEMM epilogues (1024 x 8192 rows, fp32 and bf16)
    and model 4's GELU+GroupNorm at batch 16 (same group length as batch 128)."""
    dev = torch.device("cuda")
    for dt in (torch.float32, torch.bfloat16):
        z = torch.randn(1024, 8192, device=dev).to(dt)
        gam, bet, e0 = [torch.rand(8192, device=dev).to(dt) for _ in range(3)]
        for kw in (dict(num_groups=512, post="leaky_relu(0.01);mul(2)"), dict(num_groups=512, post="add(@0)",
                                                                            reduce="min"),
                   dict(num_groups=256, pre="add(@0);hardtanh(-1,1);mish")):
            abi.groupnorm_act_cuda(z, gam, bet, [e0], attrs(**kw))
    x = torch.randn(16, 64, 258, 258, device=dev)
    gamma, beta = torch.rand(64, device=dev), torch.rand(64, device=dev)
    abi.groupnorm_act_cuda(x, gamma, beta, [], attrs(num_groups=8, pre="gelu"))
    torch.cuda.synchronize()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["smoke", "bench", "profile", "ab", "rows"])
    p.add_argument("--json", help="write the bench results here")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args(argv)
    if not torch.cuda.is_available() or not abi.has_cuda():
        print("needs a CUDA device and libfusedops built with CUDA", file=sys.stderr)
        return 2
    if a.mode == "smoke":
        return smoke()
    if a.mode == "profile":
        return profile()
    res = ab(a.iters, a.warmup) if a.mode == "ab" else rows_sweep(a.iters, a.warmup) if a.mode == "rows" else \
        bench(a.iters, a.warmup)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
