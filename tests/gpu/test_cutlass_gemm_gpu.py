"""The CUTLASS sm_90 GemmGroupNormAct kernel (GroupNorm in the GEMM's epilogue; plugins/csrc/cuda/cutlass) on the GPU:
against the float64 reference, against the cuBLASLt + epilogue path it replaces, and which kernel each plan runs.

Needs an sm_90 GPU (H100/H200) and a library built with the CUTLASS kernels; skips with the reason otherwise.
Inputs are fresh random (never zeros); outputs start as NaN, so an element no kernel wrote shows.

Tolerances against float64 (rtol = atol): TF32 1e-2 (the reference models' rule; for groups of <= 4 channels the
production path's own TF32 error), 3xTF32 1e-3 and at least 4x better than TF32 (measured 4-17x eager FP32's error,
so it stays an explicit option), float16 / bfloat16: at most 1.5x eager PyTorch's error in the same dtype plus one
output ulp.
"""

from __future__ import annotations

import pytest
import torch

from fusedops.errors import FusedopsError

from kernel_support import SKIP_REASON, cutlass_skip_reason, gen

pytestmark = pytest.mark.gpu
_SKIP = SKIP_REASON or cutlass_skip_reason()
if _SKIP:
    pytest.skip(_SKIP, allow_module_level=True)

from fusedops.plugins import abi  # noqa: E402

from gemm_plan_helpers import (DEV, ULP16, attrs, check_graph_replay, check_without_bias, eager, inputs,  # noqa: E402
                               max_err, ref, run)

CUTLASS = abi.PlanOptions(gemm_kernel=abi.GEMM_CUTLASS)
CUBLASLT = abi.PlanOptions(gemm_kernel=abi.GEMM_CUBLASLT)
THREE_TF32 = abi.PlanOptions(gemm_kernel=abi.GEMM_CUTLASS, fp32_gemm=2)


def assert_close(got, want, tol, what=""):
    got = got.detach().cpu().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True, msg=lambda m: f"{what}\n{m}")


CHAINS = [("", "leaky_relu(0.01);mul(2)", ""),        # model 1
          ("", "", "min"), ("", "add(@0)", "min"),     # model 2 (min, then its bias)
          ("add(@0);hardtanh(-1,1);mish", "", ""),     # model 3
          ("", "gelu", "logsumexp"), ("relu", "tanh", "mean"), ("", "", "sum"), ("", "sigmoid", "max"),
          ("hardtanh(-1,1);add(3);rdiv(1)", "div(@0);silu", "")]  # division steps (div.full.f32 in these kernels)


# ---------------------------------------------------------------------------------------------------------------------
# Which kernel a plan runs
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("model", ["model 1", "model 2", "model 3"])
def test_reference_models_on_the_cutlass_kernel(model, dtype):
    """Bench size (1024 x 8192 x 8192). An automatic plan keeps cuBLASLt + the GroupNorm epilogue (measured faster on
    the H200, 2026-11-23: docs/kernels.md); the CUTLASS kernel, forced, agrees with float64 (on a sample of rows:
    rows are independent) and with the cuBLASLt path."""
    G, pre, post, reduce = {"model 1": (512, "", "leaky_relu(0.01);mul(2)", ""), "model 2": (512, "", "", "min"),
                            "model 3": (256, "add(@0);hardtanh(-1,1);mish", "", "")}[model]
    x, w, b, gamma, beta, extras = inputs(1024, 8192, 8192, 1, dtype)
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
    auto, auto_kernels = run(x, w, b, gamma, beta, extras, a)
    assert auto_kernels.startswith("cublaslt("), auto_kernels
    got, kernels = run(x, w, b, gamma, beta, extras, a, CUTLASS)
    assert kernels.startswith("cutlass_gn_gemm("), kernels
    assert not torch.isnan(got).any(), "an element was not written"
    rows = torch.cat([torch.arange(0, 40), torch.arange(500, 520), torch.arange(1000, 1024)]).to(DEV)
    want = ref(x[rows], w, b, gamma, beta, extras, a)
    if dtype == torch.float32:
        assert_close(got[rows], want, 1e-2, f"{model} tf32")
    else:
        err, err_eager = max_err(got[rows], want), max_err(eager(x[rows], w, b, gamma, beta, extras, a), want)
        print(f"[cutlass {model} {dtype}] max err fused {err:.3g}, eager {err_eager:.3g}")
        assert err <= 1.5 * err_eager + ULP16[dtype], (err, err_eager)
    tol = 1e-2 if dtype == torch.float32 else 8 * ULP16[dtype]
    torch.testing.assert_close(got, auto, rtol=tol, atol=tol)


def test_plans_fall_back_to_cublaslt_for_what_the_kernel_cannot_take():
    cases = [  # (M, K, C, G, kw, reason the plan does not take CUTLASS)
        (1024, 512, 8184, 682, {}, "groups of 12 channels"),
        (1024, 512, 8192, 16, {}, "groups of 512 channels"),
        (1024, 510, 8192, 512, {}, "K = 510"),
        (1024, 512, 8192, 512, {"trans_b": 0}, "trans_b"),
        (64, 512, 8192, 512, {}, "fewer than the"),
    ]
    for M, K, C, G, kw, why in cases:
        x, w, b, gamma, beta, extras = inputs(M, K, C, 2)
        if kw.get("trans_b") == 0:
            w = w.t().contiguous()
        a = attrs(num_groups=G, post="relu", **kw)
        got, kernels = run(x, w, b, gamma, beta, extras, a)
        assert kernels.startswith("cublaslt("), (why, kernels)
        assert_close(got[:16], ref(x[:16], w, b, gamma, beta, extras, a), 1e-2, why)
        if why != "fewer than the":
            with pytest.raises(FusedopsError, match=why):
                run(x, w, b, gamma, beta, extras, a, CUTLASS)


def test_misaligned_pointers_run_the_cublaslt_path_of_the_same_plan():
    """The plan is made for 16-byte aligned X and W (TMA); a call with X one element off runs the cuBLASLt path."""
    M, K, C = 640, 260, 8192
    x, w, b, gamma, beta, extras = inputs(M, K, C, 3)
    shifted = torch.empty(M * K + 1, device=DEV)[1:].view(M, K)  # contiguous rows starting 4 bytes in
    shifted.copy_(x)
    assert shifted.data_ptr() % 16 != 0
    a = attrs(num_groups=512, pre="add(@0)", post="leaky_relu(0.01)")
    got, kernels = run(shifted, w, b, gamma, beta, extras, a, CUTLASS)
    assert kernels.startswith("cutlass_gn_gemm(") and "misaligned pointers: cublaslt(" in kernels
    assert_close(got, ref(x, w, b, gamma, beta, extras, a), 1e-2, "misaligned X")


# ---------------------------------------------------------------------------------------------------------------------
# What the kernel computes (forced, so small shapes run it too)
# ---------------------------------------------------------------------------------------------------------------------

SHAPES = [  # (M, K, C, G): batch 1 / 3 / 1000; partial tiles along M and C; groups of 1 .. 128 channels
    (1, 40, 64, 4), (3, 64, 256, 16), (1000, 64, 512, 16), (37, 200, 320, 10), (130, 96, 256, 256),
    (129, 1024, 768, 24), (3, 128, 256, 2), (5, 128, 512, 256), (64, 32, 512, 128), (6, 64, 512, 8),
    (1000, 64, 256, 32),
]


@pytest.mark.parametrize("chain", CHAINS, ids=lambda c: "|".join(c) or "plain")
@pytest.mark.parametrize("M,K,C,G", SHAPES, ids=lambda v: str(v))
def test_tf32_kernel_matches_float64(M, K, C, G, chain):
    pre, post, reduce = chain
    x, w, b, gamma, beta, extras = inputs(M, K, C, M + K + C + G)
    extras[0] = extras[0].sign() * (extras[0].abs() + 1)  # a divisor away from 0
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
    got, kernels = run(x, w, b, gamma, beta, extras, a, CUTLASS)
    assert kernels.startswith("cutlass_gn_gemm(tf32,") and (not reduce or "reduce_finish" in kernels)
    assert not torch.isnan(got).any(), "an element was not written"
    want = ref(x, w, b, gamma, beta, extras, a)
    # Groups of 2-4 channels normalise near-equal values: TF32's GEMM rounding, divided by a small group spread, can
    # exceed 1e-2 on any TF32 path (measured up to 0.085 on the H200). There the rule is the production path's own
    # error (cuBLASLt TF32 + epilogue, same rounding of the operands).
    tol = 1e-2
    if C // G <= 4:
        prod, _ = run(x, w, b, gamma, beta, extras, a, CUBLASLT)
        tol = max(tol, 1.5 * max_err(prod, want))
    assert_close(got, want, tol, f"{M}x{K}x{C} G={G} {chain}")


@pytest.mark.parametrize("chain", [CHAINS[0], CHAINS[2], CHAINS[3], CHAINS[4]], ids=lambda c: "|".join(c))
@pytest.mark.parametrize("G,path", [(64, "groups"), (32, "groups"), (16, "groups"), (8, "quads")])
def test_both_epilogue_paths_match_float64(G, path, chain):
    """Groups of 8 / 16 / 32 channels take the whole-group epilogue, other sizes the quad walk: the plan names it."""
    pre, post, reduce = chain
    x, w, b, gamma, beta, extras = inputs(300, 256, 512, G + 11)
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
    got, kernels = run(x, w, b, gamma, beta, extras, a, CUTLASS)
    assert f",{path})" in kernels, kernels
    assert_close(got, ref(x, w, b, gamma, beta, extras, a), 1e-2, f"{path} G={G} {chain}")


@pytest.mark.parametrize("config", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_tile_configuration(config, dtype):
    """The A/B configurations (cooperative, with and without a cluster; pingpong) compute the same op."""
    x, w, b, gamma, beta, extras = inputs(1000, 512, 1024, 4, dtype)
    for G, pre, post, reduce in [(64, "", "leaky_relu(0.01);mul(2)", ""), (32, "add(@0);hardtanh(-1,1);mish", "", ""),
                                 (64, "", "", "min")]:
        a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
        got, kernels = run(x, w, b, gamma, beta, extras, a, abi.PlanOptions(gemm_kernel=2, cutlass_config=config))
        assert kernels.startswith("cutlass_gn_gemm("), kernels
        want = ref(x, w, b, gamma, beta, extras, a)
        if dtype == torch.float32:
            assert_close(got, want, 1e-2, f"config {config} {pre}|{post}|{reduce}")
        else:
            err, err_eager = max_err(got, want), max_err(eager(x, w, b, gamma, beta, extras, a), want)
            assert err <= 1.5 * err_eager + ULP16[dtype], (config, pre, post, reduce, err, err_eager)


@pytest.mark.parametrize("pdtype", ["same", torch.float32])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("chain,G", [(CHAINS[0], 16), (CHAINS[2], 16), (CHAINS[3], 8), (CHAINS[4], 64)])
def test_16bit_kernels_no_worse_than_eager(dtype, pdtype, chain, G):
    pre, post, reduce = chain
    x, w, b, gamma, beta, extras = inputs(300, 512, 256, 5, dtype, pdtype=dtype if pdtype == "same" else pdtype)
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
    got, kernels = run(x, w, b, gamma, beta, extras, a, CUTLASS)
    assert got.dtype == dtype and not torch.isnan(got).any() and "cutlass_gn_gemm(" in kernels
    want = ref(x, w, b, gamma, beta, extras, a)
    err, err_eager = max_err(got, want), max_err(eager(x, w, b, gamma, beta, extras, a), want)
    print(f"[cutlass 16-bit] {dtype} params={pdtype} {chain}: max err fused {err:.3g}, eager {err_eager:.3g}")
    assert err <= 1.5 * err_eager + ULP16[dtype], (err, err_eager)


def test_without_bias():
    check_without_bias(200, 64, 256, 16, 6, CUTLASS, 1e-2)


def test_large_means_stay_accurate():
    """Two-pass statistics in registers: a group mean of ~1000 with unit spread loses nothing to E[x^2] - E[x]^2."""
    x, w, b, gamma, beta, extras = inputs(256, 64, 512, 7)
    b = b + 1000.0
    a = attrs(num_groups=32, allow_tf32=0)
    got, _ = run(x, w, b, gamma, beta, extras, a, THREE_TF32)
    # float32 D near 1000 carries ~6e-5 absolute error: the normalised output ~1e-4 relative to its spread
    assert_close(got, ref(x, w, b, gamma, beta, extras, a), 2e-3, "mean 1000")


@pytest.mark.parametrize("options,reduce", [(CUTLASS, ""), (CUTLASS, "min"), (CUTLASS, "logsumexp"),
                                            (THREE_TF32, ""), (THREE_TF32, "max")])
def test_nan_and_inf_propagate(options, reduce):
    x, w, b, gamma, beta, extras = inputs(64, 96, 256, 8)
    x[3, 5] = float("nan")                 # row 3: every group NaN
    w[40, 7] = float("nan")                # channel 40 of every row: its group NaN
    three = options.fp32_gemm == 2
    if not three:
        x[9, 11] = float("inf")            # row 9: +-inf products, then hardtanh clamps them
    a = attrs(num_groups=16, pre="hardtanh(-3,3)", post="relu", reduce=reduce, allow_tf32=0 if three else 1)
    got, kernels = run(x, w, b, gamma, beta, extras, a, options)
    assert kernels.startswith("cutlass_gn_gemm(3xtf32," if three else "cutlass_gn_gemm(tf32,"), kernels
    want = ref(x, w, b, gamma, beta, extras, a)
    got = got.cpu().double()
    assert torch.equal(torch.isnan(got), torch.isnan(want)), "NaN pattern differs"
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "Inf pattern differs"
    assert_close(got, want, 2e-4 if three else 1e-2, f"NaN/Inf {reduce}")


def test_3xtf32_turns_infinite_operands_into_nan():
    """Documented limit of the split (docs/kernels.md): lo(inf) = tf32(inf - inf) is NaN, so an infinite X element
    makes its whole GEMM row NaN where IEEE gives +-inf, which a hardtanh pre chain clamps back to finite values in
    the reference. Every other row is unaffected."""
    x, w, b, gamma, beta, extras = inputs(16, 96, 256, 9)
    x[2, 4] = float("inf")
    a = attrs(num_groups=16, pre="hardtanh(-3,3)", allow_tf32=0)
    got, _ = run(x, w, b, gamma, beta, extras, a, THREE_TF32)
    got = got.cpu().double()
    want = ref(x, w, b, gamma, beta, extras, a)
    assert torch.isfinite(want[2]).all() and torch.isnan(got[2]).all()
    keep = [i for i in range(16) if i != 2]
    assert_close(got[keep], want[keep], 2e-4, "other rows")


def test_runs_are_deterministic_and_capturable_in_a_cuda_graph():
    """A run only fills in pointers and enqueues (TMA descriptors are encoded on the host): it captures into a CUDA
    graph, and replays give identical bits (no atomics: the per-tile row partials are combined in a fixed order)."""
    x, w, b, gamma, beta, extras = inputs(1000, 256, 1024, 10)
    check_graph_replay([x, w, b, gamma, beta, *extras], attrs(num_groups=64, pre="add(@0)", reduce="min"), CUTLASS,
                       11, 1e-2)


# ---------------------------------------------------------------------------------------------------------------------
# 3xTF32: float32-level accuracy
# ---------------------------------------------------------------------------------------------------------------------

def _fp32_eager(x, w, b, gamma, beta, extras, a):
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        return eager(x, w, b, gamma, beta, extras, a)
    finally:
        torch.set_float32_matmul_precision(prev)


@pytest.mark.parametrize("kind", ["uniform", "large mean", "wide range"])
@pytest.mark.parametrize("K", [256, 1024, 4096, 8192])
def test_3xtf32_is_much_more_accurate_than_tf32(K, kind):
    """Against float64, next to eager FP32 and TF32 (numbers printed; tools/cutlass_bench.py accuracy records them).
    Until 2026-11-27 3xTF32 was 4-17x eager FP32's error, growing about linearly in K: the tensor cores' accumulation
    rounds toward zero. Each k-tile's products now go to fresh accumulators added in IEEE float32
    (three_tf32_mainloop.cuh), so it must be no less accurate than eager FP32 (or within 2e-6 where both are that
    small), at least 4x more accurate than the TF32 kernel, and within the strict-FP32 rule's 1e-3."""
    M, C = 256, 1024
    x, w, b, gamma, beta, extras = inputs(M, K, C, K + len(kind))
    if kind == "large mean":
        x = x + 100.0                        # every product shares a large offset: cancellation in the GEMM
    elif kind == "wide range":
        g = gen(K)
        x = x * torch.exp2(torch.randint(-12, 13, (M, K), generator=g).float()).to(DEV)
        w = w * torch.exp2(torch.randint(-12, 13, (C, K), generator=g).float()).to(DEV)
    a = attrs(num_groups=64, pre="add(@0)", post="leaky_relu(0.01)", allow_tf32=0)
    want = ref(x, w, b, gamma, beta, extras, a)
    got, kernels = run(x, w, b, gamma, beta, extras, a, THREE_TF32)
    assert kernels.startswith("cutlass_gn_gemm(3xtf32,"), kernels
    tf32, tf32_kernels = run(x, w, b, gamma, beta, extras, attrs(num_groups=64, pre="add(@0)",
                                                                 post="leaky_relu(0.01)"), CUTLASS)
    assert tf32_kernels.startswith("cutlass_gn_gemm(tf32,"), tf32_kernels
    err, err_tf32 = max_err(got, want), max_err(tf32, want)
    err_fp32 = max_err(_fp32_eager(x, w, b, gamma, beta, extras, a), want)
    print(f"[3xtf32] K={K} {kind}: max err 3xTF32 {err:.3g}, eager FP32 {err_fp32:.3g}, TF32 {err_tf32:.3g}")
    assert err <= 1e-3, err
    assert err * 4 <= err_tf32, (err, err_tf32)
    # (at this size the float32 epilogue sets both errors near 2e-6: H200 2026-11-27, 1.1-3.0e-6 against eager's
    # 1.6-5.4e-6, once 1.04 x; the in-place accumulation was 4-17 x eager's)
    assert err <= max(err_fp32, 2e-6), (err, err_fp32)


def test_automatic_float32_plans_run_3xtf32():
    """allow_tf32 = 0 without options: the CUTLASS 3xTF32 kernel (gemm_choice.cpp's switch: more accurate than eager
    FP32 since 2026-11-27, and faster than cuBLASLt's strict GEMM); fp32_gemm = 1 keeps cuBLASLt's strict FP32.
    2048 x 2048 outputs: 256 tiles of 128 x 128, enough for every SM (fewer keep cuBLASLt, which splits K)."""
    x, w, b, gamma, beta, extras = inputs(2048, 512, 2048, 13)
    a = attrs(num_groups=64, post="relu", allow_tf32=0)
    got, kernels = run(x, w, b, gamma, beta, extras, a)
    assert kernels.startswith("cutlass_gn_gemm(3xtf32,"), kernels
    assert_close(got, ref(x, w, b, gamma, beta, extras, a), 2e-4, "3xTF32")
    strict, kernels = run(x, w, b, gamma, beta, extras, a, abi.PlanOptions(fp32_gemm=1))
    assert kernels.startswith("cublaslt(") and "tf32" not in kernels.split("+")[0], kernels
    assert_close(strict, ref(x, w, b, gamma, beta, extras, a), 2e-4, "strict FP32")


@pytest.mark.parametrize("M,K,C,G", [(1000, 520, 1024, 64), (2048, 4096, 2048, 128), (3, 40, 256, 16)])
def test_3xtf32_schedules_compute_the_same_bits(M, K, C, G):
    """The 3xTF32 mainloop schedules (per-stage mbarriers or a named barrier after W's split) and the cluster of two
    change only when things happen, not the arithmetic: their outputs must be the default's bit for bit (partial
    tiles in M and K included), and the plans must name them."""
    x, w, b, gamma, beta, extras = inputs(M, K, C, M + 2)
    a = attrs(num_groups=G, pre="add(@0);hardtanh(-3,3)", post="relu", reduce="min" if G == 64 else "",
              allow_tf32=0)
    want, default = run(x, w, b, gamma, beta, extras, a, THREE_TF32)
    assert default.startswith("cutlass_gn_gemm(3xtf32,coop128x128x32_cluster2_split_barriers,"), default
    assert not torch.isnan(want).any()
    for config, name in [(2, "coop128x128x32_split_barriers"), (3, "coop128x128x32_named_barrier")]:
        got, kernels = run(x, w, b, gamma, beta, extras, a,
                           abi.PlanOptions(gemm_kernel=abi.GEMM_CUTLASS, fp32_gemm=2, cutlass_config=config))
        assert kernels.startswith(f"cutlass_gn_gemm(3xtf32,{name},"), kernels
        assert torch.equal(got, want), f"{name}: max difference {(got - want).abs().max().item():.3g}"


def test_3xtf32_on_the_reference_shape():
    """Model 3 at bench size: within 1e-3 of float64 (TF32 is at 1e-2), sampled rows."""
    x, w, b, gamma, beta, extras = inputs(1024, 8192, 8192, 12)
    a = attrs(num_groups=256, pre="add(@0);hardtanh(-1,1);mish", allow_tf32=0)
    got, kernels = run(x, w, b, gamma, beta, extras, a, abi.PlanOptions(fp32_gemm=2))
    assert kernels.startswith("cutlass_gn_gemm(3xtf32,"), kernels
    rows = torch.arange(0, 1024, 16, device=DEV)
    assert_close(got[rows], ref(x[rows], w, b, gamma, beta, extras, a), 1e-3, "3xTF32 model 3")
