"""CUDA GemmGroupNormAct kernels behind the C ABI, called through plugins/abi.py: strict FP32, TF32, batched
rows, the split epilogue, 16-bit vs eager, bad inputs. Inputs, poisoning, reference and tolerances as in
test_kernels_gpu.py (helpers: kernel_support.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog
from fusedops.errors import FusedopsError
from kernel_support import SKIP_REASON, DEV, TOL32, ULP16, abi, assert_close, attrs, gen, params, poisoned

pytestmark = pytest.mark.gpu

if SKIP_REASON:
    pytest.skip(SKIP_REASON, allow_module_level=True)


# ---------------------------------------------------------------------------------------------------------------------
# GemmGroupNormAct
# ---------------------------------------------------------------------------------------------------------------------

def gemm_inputs(M, K, C, seed, trans_b=1, n_extra=1, dtype=torch.float32, lead=()):
    g = gen(seed)
    x = torch.rand(*lead, M, K, generator=g)
    w = torch.randn(C, K, generator=g) / math.sqrt(K)
    if not trans_b:
        w = w.t().contiguous()
    b = torch.randn(C, generator=g) * 0.5
    gamma, beta, *extras = params(C, n_extra, seed + 1)
    return x.to(DEV, dtype), w.to(DEV, dtype), b.to(DEV), gamma, beta, extras


def ref_gemm(x, w, b, gamma, beta, extras, a):
    d = lambda t: t.detach().cpu().double() if t is not None else None  # noqa: E731
    return catalog.gemm_group_norm_act_reference(d(x), d(w), d(b), d(gamma), d(beta), [d(e) for e in extras], a)


def run_gemm(x, w, b, gamma, beta, extras, a, tf32, options=None):
    shape = catalog.output_shape("GemmGroupNormAct", tuple(x.shape), a, tuple(w.shape))
    out = poisoned(shape, x.dtype)
    y = abi.gemm_groupnorm_act_cuda(x, w, b, gamma, beta, extras, a, tf32, out=out, options=options)
    assert y is out
    return y


GEMM_CHAINS = [("", "leaky_relu(0.01);mul(2)", ""),        # model 1
               ("", "", "min"), ("", "add(@0)", "min"),     # model 2 (min, then its bias)
               ("add(@0);hardtanh(-1,1);mish", "", ""),     # model 3
               ("", "gelu", "logsumexp"), ("relu", "tanh", "mean"), ("", "", "sum"), ("", "sigmoid", "max")]
GEMM_SHAPES = [(1, 40, 63, 7), (3, 40, 63, 21), (1000, 64, 63, 63), (3, 96, 128, 1), (37, 200, 256, 32)]


@pytest.mark.parametrize("trans_b", [1, 0])
@pytest.mark.parametrize("chain", GEMM_CHAINS, ids=lambda c: "|".join(c) or "plain")
@pytest.mark.parametrize("M,K,C,G", GEMM_SHAPES, ids=lambda v: str(v))
def test_gemm_strict_fp32(M, K, C, G, chain, trans_b):
    pre, post, reduce = chain
    x, w, b, gamma, beta, extras = gemm_inputs(M, K, C, M + K + C + G, trans_b)
    a = attrs("GemmGroupNormAct", num_groups=G, pre=pre, post=post, reduce=reduce, trans_b=trans_b, allow_tf32=0)
    got = run_gemm(x, w, b, gamma, beta, extras, a, 0)
    assert not torch.isnan(got).any()
    assert_close(got, ref_gemm(x, w, b, gamma, beta, extras, a), TOL32, f"{M}x{K}x{C} G={G} {chain} tb={trans_b}")


def test_gemm_tf32_and_batched_rows():
    x, w, b, gamma, beta, extras = gemm_inputs(5, 96, 160, 30, lead=(2,))
    a = attrs("GemmGroupNormAct", num_groups=10, post="relu")
    want = ref_gemm(x, w, b, gamma, beta, extras, a)
    got = run_gemm(x, w, b, gamma, beta, extras, a, 1)
    assert got.shape == (2, 5, 160)
    assert_close(got, want, 1e-2, "tf32")


def test_gemm_bench_shape_tf32_and_fp32():
    x, w, b, gamma, beta, extras = gemm_inputs(64, 8192, 8192, 31)
    for pre, post, reduce, G in [("", "leaky_relu(0.01);mul(2)", "", 512), ("", "add(@0)", "min", 512),
                                 ("add(@0);hardtanh(-1,1);mish", "", "", 256)]:
        a = attrs("GemmGroupNormAct", num_groups=G, pre=pre, post=post, reduce=reduce)
        want = ref_gemm(x, w, b, gamma, beta, extras, a)
        assert_close(run_gemm(x, w, b, gamma, beta, extras, a, 1), want, 1e-2, f"tf32 {pre}|{post}|{reduce}")
        assert_close(run_gemm(x, w, b, gamma, beta, extras, a, 0), want, 2e-4, f"fp32 {pre}|{post}|{reduce}")


def test_gemm_without_bias_and_float32_eager():
    x, w, _, gamma, beta, extras = gemm_inputs(33, 48, 96, 32)
    a = attrs("GemmGroupNormAct", num_groups=12, post="silu", allow_tf32=0)
    got = run_gemm(x, w, None, gamma, beta, extras, a, 0)
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        eager = F.silu(F.group_norm(x @ w.t(), 12, gamma, beta, 1e-5))
    finally:
        torch.set_float32_matmul_precision(prev)
    torch.testing.assert_close(got, eager, rtol=TOL32, atol=TOL32)


def test_gemm_wide_rows_use_the_split_epilogue():
    x, w, b, gamma, beta, extras = gemm_inputs(4, 32, 65536, 33)
    for reduce in ["", "min"]:
        a = attrs("GemmGroupNormAct", num_groups=64, pre="add(@0)", post="relu", reduce=reduce, allow_tf32=0)
        assert_close(run_gemm(x, w, b, gamma, beta, extras, a, 0), ref_gemm(x, w, b, gamma, beta, extras, a),
                     TOL32, f"wide {reduce}")


@pytest.mark.parametrize("param_dtype", ["same", "float32"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("chain,G", [(("", "leaky_relu(0.01);mul(2)", ""), 16), (("", "add(@0)", "min"), 16),
                                     (("add(@0);hardtanh(-1,1);mish", "", ""), 8)])
def test_gemm_16bit_no_worse_than_eager(dtype, chain, G, param_dtype):
    pre, post, reduce = chain
    x, w, b, gamma, beta, extras = gemm_inputs(300, 512, 256, 34, dtype=dtype)
    if param_dtype == "same":
        b, gamma, beta, extras = b.to(dtype), gamma.to(dtype), beta.to(dtype), [e.to(dtype) for e in extras]
    a = attrs("GemmGroupNormAct", num_groups=G, pre=pre, post=post, reduce=reduce)
    want = ref_gemm(x, w, b, gamma, beta, extras, a)
    got = run_gemm(x, w, b, gamma, beta, extras, a, 1)
    assert got.dtype == dtype and not torch.isnan(got).any()
    z = F.linear(x, w, b.to(dtype))
    z = catalog.apply_chain(z, a.pre, [e.to(dtype) for e in extras])
    z = F.group_norm(z, G, gamma.to(dtype), beta.to(dtype), 1e-5)
    eager = catalog.apply_reduce(catalog.apply_chain(z, a.post, [e.to(dtype) for e in extras]), reduce)
    err = (got.cpu().double() - want).abs().max().item()
    err_eager = (eager.cpu().double() - want).abs().max().item()
    print(f"[16-bit gemm] {dtype} params={param_dtype} {chain}: max err fused {err:.3g}, eager {err_eager:.3g}")
    assert err <= 1.5 * err_eager + ULP16[dtype], (err, err_eager)


def test_gemm_bad_inputs_raise_clear_errors():
    x, w, b, gamma, beta, extras = gemm_inputs(4, 16, 32, 35)
    a = attrs("GemmGroupNormAct", num_groups=4)
    with pytest.raises(FusedopsError, match="K=16 features"):
        abi.gemm_groupnorm_act_cuda(x, w[:, :8].contiguous(), b, gamma, beta, extras, a, 1)
    with pytest.raises(FusedopsError, match="bias B has 31"):
        abi.gemm_groupnorm_act_cuda(x, w, b[:31], gamma, beta, extras, a, 1)
    with pytest.raises(FusedopsError, match="divisible"):
        abi.gemm_groupnorm_act_cuda(x, w, b, gamma, beta, extras, attrs("GemmGroupNormAct", num_groups=5), 1)
    with pytest.raises(FusedopsError, match="2-D"):
        abi.gemm_groupnorm_act_cuda(x, w[None], b, gamma, beta, extras, a, 1)
