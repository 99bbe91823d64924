"""GPU tests of the fused ops at awkward shapes, through the PyTorch ops and the ABI binding with NaN-poisoned
outputs: strict FP32 / TF32 GEMM shapes, GroupNorm ranks 2-5, 16-bit, NaN / inf, side streams, opcheck, memory, CUDA
graphs, gradients. Tolerances and poisoning as in test_models_gpu.py (fixture: model_support.py)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog
from fusedops.models import get_entry
from fusedops.plugins import torch_ops
from model_support import KEYS, TOL_16, _gen, _max_err, _params, precision
from model_support import _need_cuda_kernels  # noqa: F401 - autouse module fixture, applies by being here

pytestmark = pytest.mark.gpu


# ---------------------------------------------------------------------------------------------------------------------
# The ops at awkward shapes, through the ops and through the ABI binding with a NaN-poisoned output
# ---------------------------------------------------------------------------------------------------------------------



GEMM_SHAPES = [  # (M, K, C, G): one channel a group, one group, C and K off every tile size, bench shape
    (1, 8192, 8192, 512),
    (3, 129, 200, 8),
    (1000, 257, 1000, 125),
    (1000, 64, 96, 96),
    (17, 300, 384, 1),
    (1024, 8192, 8192, 256),
]
GEMM_CHAINS = [("", "leaky_relu(0.01);mul(2)", ""), ("", "", "min"), ("add(@0);hardtanh(-1,1);mish", "", ""),
               ("gelu", "silu", "max")]


@pytest.mark.parametrize("chain", GEMM_CHAINS, ids=lambda c: "|".join(c))
@pytest.mark.parametrize("M,K,C,G", GEMM_SHAPES)
def test_gemm_op_shapes_strict_fp32(M, K, C, G, chain):
    pre, post, reduce = chain
    g = _gen(M + K + C)
    x = torch.rand(M, K, generator=g).cuda()
    w = (torch.rand(C, K, generator=g) * 2 - 1).cuda() / K**0.5
    gamma, beta, b, e0 = _params(C, 2, seed=C)
    a = torch_ops.parsed_attrs("GemmGroupNormAct", G, 1e-5, pre, post, reduce, 1, 0)
    want = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(),
                                                 beta.double(), [e0.double()], a)
    got = torch_ops.gemm_group_norm_act(x, w, b, gamma, beta, [e0], G, 1e-5, pre, post, reduce, 1, 0)
    assert got.shape == want.shape and not torch.isnan(got).any()
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)

    from fusedops.plugins import abi

    out = torch.full(want.shape, float("nan"), device="cuda")
    abi.gemm_groupnorm_act_cuda(x, w, b, gamma, beta, [e0], a, 0, out=out)
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)


def test_gemm_op_trans_b_0_and_tf32():
    g = _gen(7)
    x = torch.rand(2, 5, 96, generator=g).cuda()
    w_kc = (torch.randn(96, 160, generator=g) / 10).cuda()
    gamma, beta, b = _params(160, 1, seed=3)
    a = torch_ops.parsed_attrs("GemmGroupNormAct", 10, 1e-5, "", "relu", "", 0, 1)
    want = catalog.gemm_group_norm_act_reference(x.double(), w_kc.double(), b.double(), gamma.double(),
                                                 beta.double(), [], a)
    for tf32, tol in ((0, 1e-4), (1, 1e-2)):
        got = torch_ops.gemm_group_norm_act(x, w_kc, b, gamma, beta, [], 10, 1e-5, "", "relu", "", 0, tf32)
        assert got.shape == (2, 5, 160)
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


GN_SHAPES = [  # rank 2-5, one channel a group, one group, odd spatial sizes, a large S
    # (2, 3, 1) with 3 groups: one value a group (output = beta). With N = 1 too, F.group_norm (the reference)
    # refuses it ("Expected more than 1 value per channel"), so the single-value case runs at N = 2.
    ((5, 12), 4), ((3, 7, 33), 7), ((2, 64, 258, 258), 8), ((4, 6, 5, 7, 9), 1), ((2, 3, 1), 3),
    ((1000, 24, 3, 5), 6), ((2, 1, 4097), 1),
]
GN_CHAINS = [("gelu", "", ""), ("", "leaky_relu(0.2);mul(2)", "min"), ("add(@0);tanh", "mul(@1)", "logsumexp"),
             ("", "hardswish", "sum")]


@pytest.mark.parametrize("chain", GN_CHAINS, ids=lambda c: "|".join(c))
@pytest.mark.parametrize("shape,G", GN_SHAPES)
def test_group_norm_op_shapes(shape, G, chain):
    pre, post, reduce = chain
    x = (torch.randn(*shape, generator=_gen(sum(shape))) * 2 + 0.3).cuda()
    gamma, beta, e0, e1 = _params(shape[1], 2, seed=shape[1])
    a = torch_ops.parsed_attrs("GroupNormAct", G, 1e-5, pre, post, reduce)
    want = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [e0.double(), e1.double()],
                                            a)
    got = torch_ops.group_norm_act(x, gamma, beta, [e0, e1], G, 1e-5, pre, post, reduce)
    assert got.shape == want.shape and not torch.isnan(got).any()
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)

    from fusedops.plugins import abi

    out = torch.full(want.shape, float("nan"), device="cuda")
    abi.groupnorm_act_cuda(x, gamma, beta, [e0, e1], a, out=out)
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_group_norm_op_16bit(dtype):
    x = (torch.randn(3, 32, 17, 19, generator=_gen(9)) * 3).cuda().to(dtype)
    gamma, beta = [t.to(dtype) for t in _params(32, 0, seed=9)]
    a = torch_ops.parsed_attrs("GroupNormAct", 4, 1e-5, "gelu", "", "")
    got = torch_ops.group_norm_act(x, gamma, beta, [], 4, 1e-5, "gelu")
    want = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [], a)
    eager = F.group_norm(F.gelu(x), 4, gamma, beta, 1e-5)
    assert got.dtype == dtype
    # float32 statistics inside: only the output's own rounding (1 ulp of 16-bit) remains.
    e_fused, e_eager = _max_err(got, want), _max_err(eager, want)
    assert e_fused <= max(1.25 * e_eager, TOL_16[dtype] / 4), (e_fused, e_eager)


def test_nan_and_inf_propagate_like_pytorch():
    x = torch.randn(4, 16, 9, generator=_gen(10)).cuda()
    x[1, 0, 0] = float("nan")
    x[2, 9, 3] = float("inf")
    x[3, 5, 5] = float("-inf")
    gamma, beta = _params(16, 0, seed=10)
    got = torch_ops.group_norm_act(x, gamma, beta, [], 4, 1e-5, "", "relu", "")
    want = torch.relu(F.group_norm(x, 4, gamma, beta, 1e-5))
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-4)
    assert torch.isfinite(got[0]).all()

    xg = torch.rand(4, 32, generator=_gen(11)).cuda()
    xg[1, 3] = float("nan")
    w = torch.randn(64, 32, generator=_gen(12)).cuda() / 6
    b, gm, bt = _params(64, 1, seed=13)[:3]
    with precision("fp32"):
        got = torch_ops.gemm_group_norm_act(xg, w, b, gm, bt, [], 8, 1e-5, "", "", "min")
        want = torch.amin(F.group_norm(F.linear(xg, w, b), 8, gm, bt, 1e-5), dim=1, keepdim=True)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-4)
    assert torch.isnan(got[1]).all() and torch.isfinite(got[[0, 2, 3]]).all()


def test_side_stream_and_non_contiguous_input():
    x = torch.randn(48, 6, 33, generator=_gen(14)).cuda().transpose(0, 1)  # (6, 48, 33), not contiguous
    gamma, beta = _params(48, 0, seed=14)
    want = F.group_norm(F.gelu(x.contiguous()), 6, gamma, beta, 1e-5)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = torch_ops.group_norm_act(x, gamma, beta, [], 6, 1e-5, "gelu")
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_opcheck_on_cuda():
    g = _gen(15)
    x = torch.randn(3, 12, 5, 7, generator=g).cuda()
    gamma, beta, e0 = _params(12, 1, seed=15)
    torch.library.opcheck(torch.ops.fusedops.group_norm_act.default,
                          (x, gamma, beta, [e0], 4, 1e-5, "add(@0);gelu", "", "min"))
    xg, w = torch.rand(6, 40, generator=g).cuda(), (torch.randn(24, 40, generator=g) / 6).cuda()
    b, gm, bt, e0 = _params(24, 2, seed=16)
    for tf32 in (0, 1):
        torch.library.opcheck(torch.ops.fusedops.gemm_group_norm_act.default,
                              (xg, w, b, gm, bt, [e0], 6, 1e-5, "add(@0);hardtanh(-1,1);mish", "", "", 1, tf32))


def test_cuda_rejects_float64_with_a_clear_error():
    from fusedops.errors import FusedopsError

    x = torch.randn(2, 4, 3, dtype=torch.float64, device="cuda")
    with pytest.raises(FusedopsError, match="X has dtype torch.float64"):
        torch_ops.group_norm_act(x, torch.ones(4, device="cuda"), torch.zeros(4, device="cuda"), [], 2)
    with pytest.raises(FusedopsError, match="gamma is on cpu"):
        torch_ops.group_norm_act(x.float(), torch.ones(4), torch.zeros(4, device="cuda"), [], 2)


@pytest.mark.skipif(os.environ.get("FUSEDOPS_SKIP_MEMORY_TEST") == "1", reason="FUSEDOPS_SKIP_MEMORY_TEST=1")
def test_model4_no_output_sized_intermediate():
    """The fused GELU+GroupNorm allocates nothing but its output (and a workspace far smaller than the output)."""
    x = torch.randn(16, 64, 258, 258, generator=_gen(17)).cuda()
    gamma, beta = _params(64, 0, seed=17)
    torch_ops.group_norm_act(x, gamma, beta, [], 8, 1e-5, "gelu")  # warm-up (library load, handle)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = torch_ops.group_norm_act(x, gamma, beta, [], 8, 1e-5, "gelu")
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    out_bytes = y.numel() * y.element_size()
    assert extra < 1.1 * out_bytes, f"peak extra {extra / 2**20:.1f} MiB for a {out_bytes / 2**20:.1f} MiB output"


@pytest.mark.skipif(os.environ.get("FUSEDOPS_SKIP_MEMORY_TEST") == "1", reason="FUSEDOPS_SKIP_MEMORY_TEST=1")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemm_op_no_output_sized_intermediate(dtype):
    """Without a reduction the GEMM writes into the output and the epilogue runs in place: the call allocates its
    output plus cuBLASLt's workspace (4 MiB), never a second (M, C) buffer. At model 1's bench shape."""
    M, K, C = 1024, 8192, 8192
    x = torch.rand(M, K, generator=_gen(18)).to("cuda", dtype)
    w = (torch.randn(C, K, generator=_gen(19)) / 90).to("cuda", dtype)
    gamma, beta = (t.to(dtype) for t in _params(C, 0, seed=18))
    b = torch.zeros(C, device="cuda", dtype=dtype)

    def call():
        return torch_ops.gemm_group_norm_act(x, w, b, gamma, beta, [], 512, 1e-5, "", "leaky_relu(0.01);mul(2)")

    call()  # warm-up (library load, cuBLASLt handle and heuristic)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = call()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    out_bytes = y.numel() * y.element_size()
    assert extra <= out_bytes + (5 << 20), f"peak extra {extra / 2**20:.1f} MiB for a {out_bytes / 2**20:.1f} MiB output"


@pytest.mark.parametrize("key", KEYS)
def test_model_in_a_cuda_graph(key):
    """The ops allocate through PyTorch's allocator and never synchronise, so a CUDA graph can capture them."""
    entry = get_entry(key)
    new = entry.build("small", cls_name="ModelNew", seed=3).cuda()
    ref = entry.build("small", seed=3).cuda()
    (x,) = entry.inputs("small", batch=6, generator=_gen(6), device="cuda")
    static_x = x.clone()
    with precision("fp32"), torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            new(static_x)  # warm-up outside the capture (library load, cuBLASLt handle and algorithm choice)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = new(static_x)
        for seed in (7, 8):
            (x2,) = entry.inputs("small", batch=6, generator=_gen(seed), device="cuda")
            static_x.copy_(x2)
            static_y.fill_(float("nan"))
            graph.replay()
            torch.testing.assert_close(static_y, ref(x2), rtol=1e-4, atol=1e-4)


def test_gemm_op_on_a_side_stream():
    g = _gen(18)
    x = torch.rand(300, 200, generator=g).cuda()
    w = (torch.randn(256, 200, generator=g) / 14).cuda()
    b, gm, bt = _params(256, 1, seed=18)[:3]
    with precision("fp32"):
        want = F.leaky_relu(F.group_norm(F.linear(x, w, b), 16, gm, bt, 1e-5), 0.01) * 2
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            got = torch_ops.gemm_group_norm_act(x, w, b, gm, bt, [], 16, 1e-5, "", "leaky_relu(0.01);mul(2)")
        torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key", KEYS)
def test_model_gradients_on_cuda(key):
    entry = get_entry(key)
    ref = entry.build("small", seed=4).cuda()
    new = entry.build("small", cls_name="ModelNew", seed=4).cuda()
    (x,) = entry.inputs("small", batch=5, generator=_gen(9), device="cuda")
    x_ref, x_new = x.clone().requires_grad_(), x.clone().requires_grad_()
    with precision("fp32"):
        g_out = torch.randn(ref(x).shape, generator=_gen(10)).cuda()
        (ref(x_ref) * g_out).sum().backward()
        (new(x_new) * g_out).sum().backward()
    torch.testing.assert_close(x_new.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
    for (n, p), (_, q) in zip(ref.named_parameters(), new.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=n)


def test_empty_batch_on_cuda():
    gamma, beta = _params(12, 0, seed=19)
    y = torch_ops.group_norm_act(torch.randn(0, 12, 5, device="cuda"), gamma, beta, [], 4)
    assert y.shape == (0, 12, 5)
    w = torch.randn(12, 10, device="cuda")
    y = torch_ops.gemm_group_norm_act(torch.randn(0, 10, device="cuda"), w, beta, gamma, beta, [], 4, reduce="min")
    assert y.shape == (0, 1)
