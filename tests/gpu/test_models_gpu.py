"""GPU tests of the fused ops and the four fused models (ModelNew) against float64 references and eager PyTorch.

Tolerances (max |got - ref| allowed, as rtol/atol of torch.testing.assert_close against the float64 reference):
  strict FP32 (torch.get_float32_matmul_precision() == "highest", cuDNN TF32 off): 1e-4 / 1e-4
  TF32: 1e-2 / 1e-2 (the reference models' own acceptance rule)
  16-bit (fp16 / bf16 weights and inputs): the fused op must be no less accurate than eager PyTorch in the same
  type (≤ 1.25 × eager's max error, or ≤ the measured floor below), and within 16-bit bounds: GroupNorm divides the
  GEMM's rounding error (2^-8 relative for bf16, 2^-11 for fp16) by the group std, so a few ulp of the unit-scale
  output: bf16 5e-2, fp16 1e-2 as rtol/atol. Measured on the H200 (2026-11-22), max |fused - float64| at bench
  size, models 1-4: bf16 3.3e-2 / 2.8e-2 / 1.5e-2 / 7.5e-2 (eager bf16 4.3e-2 / 3.4e-2 / 3.2e-2 / 9.3e-2), fp16
  3.8e-3 / 3.3e-3 / 1.5e-3 / 6.7e-3 (eager 5.1e-3 / 4.3e-3 / 2.9e-3 / 8.0e-3), on outputs up to ~6 in magnitude.
Outputs are poisoned before kernels run: this module turns on torch_ops.set_poison_outputs (and
FUSEDOPS_POISON_OUTPUTS=1 for the ABI binding), so every output (and workspace) the ops and the fused models allocate
starts as NaN (0xFF bytes); every input is NaN-free, so a NaN in an output is an element no kernel wrote (or a
workspace byte read before it was written).
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog
from fusedops.models import REGISTRY, get_entry
from fusedops.plugins import torch_ops

pytestmark = pytest.mark.gpu

KEYS = list(REGISTRY)
_REF64: dict[str, tuple] = {}  # key → (Model, ModelNew, input, float64 output) at bench size, one model at a time
TOL = {"fp32": (1e-4, 1e-4), "tf32": (1e-2, 1e-2)}
TOL_16 = {torch.bfloat16: 5e-2, torch.float16: 1e-2}


@pytest.fixture(autouse=True, scope="module")
def _need_cuda_kernels():
    ok, why = torch_ops.cuda_kernels_available()
    if not ok:
        pytest.skip(f"needs a CUDA device and the fusedops CUDA library: {why}")
    old = os.environ.get("FUSEDOPS_POISON_OUTPUTS")
    os.environ["FUSEDOPS_POISON_OUTPUTS"] = "1"  # the ABI binding's own allocations (tests calling plugins.abi)
    torch_ops.set_poison_outputs(True)           # the C++ ops' allocations
    yield
    torch_ops.set_poison_outputs(False)
    if old is None:
        os.environ.pop("FUSEDOPS_POISON_OUTPUTS")
    else:
        os.environ["FUSEDOPS_POISON_OUTPUTS"] = old
    _REF64.clear()
    torch.cuda.empty_cache()


class precision:
    """fp32: strict FP32 GEMMs and convolutions; tf32: TF32 for both."""

    def __init__(self, p):
        self.p = p

    def __enter__(self):
        self.old = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
        torch.set_float32_matmul_precision("highest" if self.p == "fp32" else "high")
        torch.backends.cudnn.allow_tf32 = self.p != "fp32"

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.old[0])
        torch.backends.cudnn.allow_tf32 = self.old[1]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _max_err(a, b):
    return (a.double() - b.double()).abs().max().item()


# ---------------------------------------------------------------------------------------------------------------------
# The four models at benchmark size
# ---------------------------------------------------------------------------------------------------------------------

def _bench_case(key):
    """(Model fp32, ModelNew fp32, input fp32, float64 reference output) on the GPU, built once a module run."""
    if key not in _REF64:
        _REF64.clear()
        torch.cuda.empty_cache()
        entry = get_entry(key)
        ref = entry.build("bench", seed=0).cuda()
        new = entry.build("bench", cls_name="ModelNew", seed=0).cuda()
        (x,) = entry.inputs("bench", generator=_gen(42), device="cuda")
        with torch.no_grad():
            want = copy.deepcopy(ref).double()(x.double())
        _REF64[key] = (ref, new, x, want)
    return _REF64[key]


@pytest.mark.parametrize("p", ["fp32", "tf32"])
@pytest.mark.parametrize("key", KEYS)
def test_model_bench_size_float32(key, p):
    ref, new, x, want = _bench_case(key)
    with precision(p), torch.no_grad():
        got = new(x)
        eager = ref(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert not torch.isnan(got).any(), "NaN in the output of NaN-free inputs (unwritten output?)"
    rtol, atol = TOL[p]
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
    torch.testing.assert_close(got, eager, rtol=2 * rtol, atol=2 * atol)
    print(f"{key} {p}: max err vs float64 fused {_max_err(got, want):.2e}, eager {_max_err(eager, want):.2e}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("key", KEYS)
def test_model_16bit(key, dtype):
    """Benchmark size for bf16 (the benchmarked 16-bit type); fp16 at batch 64 (4 for model 4) to save time."""
    entry = get_entry(key)
    batch = None if dtype == torch.bfloat16 else (4 if entry.number == 4 else 64)
    ref = entry.build("bench", seed=0).cuda().to(dtype)
    new = entry.build("bench", cls_name="ModelNew", seed=0).cuda().to(dtype)
    (x,) = entry.inputs("bench", batch=batch, generator=_gen(43), device="cuda", dtype=dtype)
    with torch.no_grad():
        got, eager = new(x), ref(x)
        want = copy.deepcopy(ref).double()(x.double())  # the same 16-bit weights and input, float64 math
    del ref
    assert got.dtype == dtype and not torch.isnan(got).any()
    e_fused, e_eager = _max_err(got, want), _max_err(eager, want)
    print(f"{key} {dtype}: max err vs float64 fused {e_fused:.3e}, eager {e_eager:.3e}")
    assert e_fused <= max(1.25 * e_eager, TOL_16[dtype] / 4), (e_fused, e_eager)
    torch.testing.assert_close(got.double(), want, rtol=TOL_16[dtype], atol=TOL_16[dtype])


@pytest.mark.parametrize("batch", [1, 3, 1000])
@pytest.mark.parametrize("key", KEYS)
def test_model_awkward_batches(key, batch):
    """Benchmark feature sizes at batches 1, 3, 1000 (model 4: small spatial size, batch 1000 of it)."""
    entry = get_entry(key)
    size = "small" if entry.number == 4 else "bench"
    ref = entry.build(size, seed=1).cuda()
    new = entry.build(size, cls_name="ModelNew", seed=1).cuda()
    (x,) = entry.inputs(size, batch=batch, generator=_gen(batch), device="cuda")
    with precision("fp32"), torch.no_grad():
        got = new(x)
        want = copy.deepcopy(ref).double()(x.double())
    assert got.shape == want.shape and not torch.isnan(got).any()
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key", KEYS)
def test_model_compile_and_export_on_cuda(key):
    entry = get_entry(key)
    new = entry.build("small", cls_name="ModelNew", seed=2).cuda()
    ref = entry.build("small", seed=2).cuda()
    (x,) = entry.inputs("small", batch=5, generator=_gen(5), device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(new, fullgraph=True)
    ep = torch.export.export(new, (x,))
    with precision("fp32"), torch.no_grad():
        want = ref(x)
        torch.testing.assert_close(compiled(x), want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ep.module()(x), want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------------
# The ops at awkward shapes, through the ops and through the ABI binding with a NaN-poisoned output
# ---------------------------------------------------------------------------------------------------------------------

def _params(C, n_extras, seed, device="cuda"):
    g = _gen(seed)
    t = [torch.randn(C, generator=g) for _ in range(2 + n_extras)]
    t[0] = t[0] + 1.0
    return [v.to(device) for v in t]


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


# ---------------------------------------------------------------------------------------------------------------------
# The low-latency path: CUDA graphs at the reference size, torch.compile(reduce-overhead), concurrency, plan choice
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", KEYS)
def test_model_graph_capture_at_bench_size_matches_eager_runs(key):
    """torch.cuda.graphs capture of ModelNew at the reference shape (batch 16 for model 4: its reference batch is
    2 GB): replays on fresh inputs give what plain runs of ModelNew give, bit for bit."""
    entry = get_entry(key)
    new = entry.build("bench", cls_name="ModelNew", seed=11).cuda()
    batch = 16 if entry.number == 4 else None
    (x,) = entry.inputs("bench", batch=batch, generator=_gen(11), device="cuda")
    static_x = x.clone()
    with precision("tf32"), torch.inference_mode():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            new(static_x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = new(static_x)
        for seed in (12, 13):
            (x2,) = entry.inputs("bench", batch=batch, generator=_gen(seed), device="cuda")
            static_x.copy_(x2)
            static_y.fill_(float("nan"))
            graph.replay()
            torch.testing.assert_close(static_y, new(x2), rtol=0, atol=0)


@pytest.mark.parametrize("key", KEYS)
def test_model_compiled_reduce_overhead_matches_eager(key):
    """torch.compile(mode="reduce-overhead") over ModelNew (Inductor with CUDA graphs around the custom op)."""
    entry = get_entry(key)
    new = entry.build("small", cls_name="ModelNew", seed=14).cuda()
    ref = entry.build("small", seed=14).cuda()
    torch._dynamo.reset()
    compiled = torch.compile(new, mode="reduce-overhead", fullgraph=True)
    with precision("fp32"), torch.inference_mode():
        for seed in (15, 16, 17, 18):  # several calls: the graph is recorded, then replayed
            (x,) = entry.inputs("small", batch=6, generator=_gen(seed), device="cuda")
            got = compiled(x).clone()
            torch.testing.assert_close(got, ref(x), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()


def test_one_plan_from_two_threads_on_two_streams():
    """The cached plan is shared by concurrent calls: two threads, each on its own stream, many calls each."""
    import threading

    g = _gen(20)
    x = [torch.rand(64, 512, generator=g).cuda() for _ in range(2)]
    w = (torch.randn(1024, 512, generator=g) / 22).cuda()
    b, gm, bt = _params(1024, 0, seed=21)[0], *_params(1024, 0, seed=22)[:2]
    with precision("fp32"):
        want = [F.leaky_relu(F.group_norm(F.linear(xi, w, b), 64, gm, bt, 1e-5), 0.01) * 2 for xi in x]
    errors, outs = [], [[], []]

    def worker(i):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s), precision("fp32"):
                for _ in range(50):
                    outs[i].append(torch_ops.gemm_group_norm_act(x[i], w, b, gm, bt, [], 64, 1e-5, "",
                                                                 "leaky_relu(0.01);mul(2)"))
            s.synchronize()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):
        for y in outs[i]:
            torch.testing.assert_close(y, want[i], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key", KEYS)
def test_planner_picks_the_measured_kernels(key):
    """What each ModelNew's op runs at the reference shape (docs/kernels.md explains the choices)."""
    entry = get_entry(key)
    new = entry.build("bench", cls_name="ModelNew", seed=23).cuda()
    batch = 4 if entry.number == 4 else None
    (x,) = entry.inputs("bench", batch=batch, generator=_gen(23), device="cuda")
    if entry.number == 4:
        gn = new.group_norm
        y = new.conv_transpose(x)
        text = torch_ops.plan_kernels(y, gn.weight, gn.bias, [], gn.num_groups, gn.eps, "gelu")
        assert text.startswith("gn_onepass(vec4,pre=gelu_fast"), text
        return
    lin = next(m for m in new.modules() if isinstance(m, torch.nn.Linear))
    gn = next(m for m in new.modules() if isinstance(m, torch.nn.GroupNorm))
    with precision("tf32"):
        text = torch_ops.plan_kernels(x, gn.weight, gn.bias, [], gn.num_groups, gn.eps, w=lin.weight, b=lin.bias)
    assert text.startswith("cublaslt(bias epilogue,tf32) + gn_row_tile"), text
