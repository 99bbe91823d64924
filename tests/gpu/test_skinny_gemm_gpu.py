"""The skinny GEMM of GemmGroupNormAct (M <= 16 rows: plugins/csrc/cuda/skinny_gemm.cu, W streamed through the CUDA
cores, then the GroupNorm epilogue) on the GPU, forced through the plan options: against float64, against the
cuBLASLt path it replaces, on misaligned pointers (the plan's cuBLASLt path) and inside a CUDA graph.

Tolerances against float64 (rtol = atol): float32 2e-4 (the strict-FP32 rule: the kernel accumulates in float32
FMA whatever allow_tf32 says); float16 / bfloat16: at most 1.5x eager PyTorch's error in the same dtype plus one
output ulp (D is rounded to X's dtype before the GroupNorm, as after cuBLASLt).
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from kernel_support import SKIP_REASON

pytestmark = pytest.mark.gpu
if SKIP_REASON:
    pytest.skip(SKIP_REASON, allow_module_level=True)

import gemm_plan_helpers  # noqa: E402
from fusedops.plugins import abi  # noqa: E402
from gemm_plan_helpers import (DEV, ULP16, attrs, check_graph_replay, check_without_bias, eager, max_err,  # noqa: E402
                               plan_for, ref, run)

inputs = partial(gemm_plan_helpers.inputs, x_scale=2.0, x_shift=-0.5)  # X spans negative values too
SKINNY = abi.PlanOptions(gemm_kernel=abi.GEMM_SKINNY)
CUBLASLT = abi.PlanOptions(gemm_kernel=abi.GEMM_CUBLASLT)
CHAINS = [("", "leaky_relu(0.01);mul(2)", ""), ("", "", "min"), ("add(@0);hardtanh(-1,1);mish", "", ""),
          ("", "gelu", "logsumexp")]


@pytest.mark.parametrize("chain", CHAINS, ids=lambda c: "|".join(c))
@pytest.mark.parametrize("M,K,C,G", [(1, 8192, 8192, 512), (2, 512, 1024, 64), (3, 1000, 200, 10),
                                     (5, 64, 96, 8), (8, 2048, 2048, 128), (13, 256, 320, 16), (16, 4096, 4096, 256)])
@pytest.mark.parametrize("allow_tf32", [1, 0])
def test_float32_matches_float64(M, K, C, G, chain, allow_tf32):
    pre, post, reduce = chain
    x, w, b, gamma, beta, extras = inputs(M, K, C, M * 7 + K + C)
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce, allow_tf32=allow_tf32)
    got, kernels = run(x, w, b, gamma, beta, extras, a, SKINNY)
    assert kernels.startswith(f"skinny_gemm(M={M}) + "), kernels
    assert not torch.isnan(got).any(), "an element was not written"
    want = ref(x, w, b, gamma, beta, extras, a)
    torch.testing.assert_close(got.cpu().double(), want, rtol=2e-4, atol=2e-4)
    strict, strict_kernels = run(x, w, b, gamma, beta, extras, attrs(num_groups=G, pre=pre, post=post, reduce=reduce,
                                                                     allow_tf32=0), CUBLASLT)
    assert strict_kernels.startswith("cublaslt("), strict_kernels
    assert max_err(got, want) <= 2 * max_err(strict, want) + 1e-6, "less accurate than cuBLASLt's strict FP32"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pdtype", ["same", torch.float32])
@pytest.mark.parametrize("M", [1, 4, 16])
def test_16bit_no_worse_than_eager(M, dtype, pdtype):
    x, w, b, gamma, beta, extras = inputs(M, 4096, 2048, M, dtype, pdtype=dtype if pdtype == "same" else pdtype)
    a = attrs(num_groups=128, post="leaky_relu(0.01);mul(2)")
    got, kernels = run(x, w, b, gamma, beta, extras, a, SKINNY)
    assert got.dtype == dtype and kernels.startswith("skinny_gemm(") and not torch.isnan(got).any()
    want = ref(x, w, b, gamma, beta, extras, a)
    err, err_eager = max_err(got, want), max_err(eager(x, w, b, gamma, beta, extras, a), want)
    print(f"[skinny] M={M} {dtype} params={pdtype}: max err {err:.3g}, eager {err_eager:.3g}")
    assert err <= 1.5 * err_eager + ULP16[dtype], (err, err_eager)


def test_without_bias():
    check_without_bias(3, 256, 512, 32, 21, SKINNY, 2e-4, make_inputs=inputs)


def test_misaligned_pointers_run_the_cublaslt_path_of_the_same_plan():
    M, K, C = 4, 260, 512
    x, w, b, gamma, beta, extras = inputs(M, K, C, 22)
    shifted = torch.empty(M * K + 1, device=DEV)[1:].view(M, K)  # rows starting 4 bytes off a 16-byte boundary
    shifted.copy_(x)
    a = attrs(num_groups=32, pre="add(@0)", post="leaky_relu(0.01)")
    got, kernels = run(shifted, w, b, gamma, beta, extras, a, SKINNY)
    assert kernels.startswith("skinny_gemm(M=4)") and "[misaligned pointers: cublaslt(" in kernels, kernels
    torch.testing.assert_close(got.cpu().double(), ref(x, w, b, gamma, beta, extras, a), rtol=1e-2, atol=1e-2)


def test_capturable_in_a_cuda_graph():
    """A run only enqueues (no allocation, no query): it captures, and replays follow new inputs bit for bit."""
    x, w, b, gamma, beta, extras = inputs(8, 1024, 2048, 23)
    check_graph_replay([x, w, b, gamma, beta, *extras], attrs(num_groups=64, pre="add(@0)", reduce="min"), SKINNY,
                       24, 2e-4)


def test_automatic_plans_follow_the_planner_rule():
    """What an automatic plan runs at batch 1 is the C ABI's rule (tests/test_gemm_choice.py), not a second copy."""
    x, w, b, gamma, beta, extras = inputs(1, 512, 1024, 25)
    a = attrs(num_groups=64, post="relu")
    tensors = [x, w, b, gamma, beta, *extras]
    plan, _ = plan_for(tensors, a)
    d, _ = abi.describe(abi.parse_attributes("GemmGroupNormAct", a),
                        [abi.tensor_desc(t.dtype, tuple(t.shape)) for t in tensors])
    cc = torch.cuda.get_device_capability()
    dev = abi.GemmDevice(cc[0], cc[1], torch.cuda.get_device_properties(0).multi_processor_count,
                         int(abi.has_cutlass()))
    kernel, _ = abi.gemm_kernel_choice(d, dev)
    assert plan.kernels.startswith("skinny_gemm(" if kernel == abi.GEMM_SKINNY else "cublaslt("), plan.kernels
