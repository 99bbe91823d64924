"""CUDA GroupNormAct kernels behind the C ABI (plugins/csrc/cuda), called through plugins/abi.py (GemmGroupNormAct:
test_gemm_kernels_gpu.py; shared helpers: kernel_support.py).

Every run writes into an output poisoned with NaN, on fresh random inputs, and is compared with the catalog's
reference evaluated in float64 on the CPU (and, where the precision is not float32, with eager PyTorch in the same
precision on the GPU).

Tolerances (rtol = atol, against the float64 reference):
  float32 GroupNorm and strict-FP32 GEMM: 1e-4 (float32 statistics and transcendental functions: a few ulp of O(1)
  outputs, amplified by 1/std of the group).
  TF32 GEMM: 1e-2 (10-bit mantissa operands; the reference models' own acceptance rule).
  float16 / bfloat16: our max error must not exceed 1.5x eager PyTorch's max error in the same dtype plus one output
  ulp at |y| ~ 4 (2^-8 for fp16, 2^-5 for bf16): the output rounding alone is 0.5 ulp, and both implementations
  round the same float32 math differently by up to one ulp.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog
from fusedops.errors import FusedopsError
from kernel_support import (SKIP_REASON, DEV, TOL32, ULP16, abi, assert_close, attrs, check_gn, gen, params, poisoned,
                            ref_gn, run_gn)

pytestmark = pytest.mark.gpu

if SKIP_REASON:
    pytest.skip(SKIP_REASON, allow_module_level=True)


# ---------------------------------------------------------------------------------------------------------------------
# GroupNormAct
# ---------------------------------------------------------------------------------------------------------------------

STEP_CASES = []
for _name, _kind in catalog.STEP_KINDS.items():
    if _kind.binary:
        STEP_CASES += [f"{_name}(1.5)", f"{_name}(@0)"] if _name not in ("div", "rdiv") else [f"{_name}(@1)"]
    else:
        STEP_CASES.append(_name)
STEP_CASES += ["leaky_relu(0.2)", "hardtanh(-0.5,inf)", "softplus(2,3)", "hardsigmoid(0.3,0.4)"]


@pytest.mark.parametrize("where", ["pre", "post"])
@pytest.mark.parametrize("step", STEP_CASES)
def test_every_step_alone(step, where):
    # extra 1 is kept away from 0 so that div / rdiv operands are well conditioned.
    x = (torch.randn(3, 12, 5, 7, generator=gen(1)) * 2 + 0.3).to(DEV)
    gamma, beta, e0, e1 = params(12, 2, 2)
    e1 = e1.sign() * (e1.abs() + 1) if step.startswith("div") else e1.abs() + 1
    a = attrs(num_groups=4, **{where: step})
    assert_close(run_gn(x, gamma, beta, [e0, e1], a), ref_gn(x, gamma, beta, [e0, e1], a), TOL32, step)


CHAINS = [
    ("gelu", "", ""),
    ("add(@0);hardtanh(-1,1);mish", "", ""),
    ("", "leaky_relu(0.01);mul(2)", ""),
    ("", "", "min"),
    ("", "add(@1)", "min"),
    ("tanh", "silu", "max"),
    ("", "hardswish", "sum"),
    ("mul(@0)", "gelu_tanh", "mean"),
    ("", "sigmoid;mul(3)", "logsumexp"),
]
SHAPES = [  # (shape, G): ranks 2-5, batch 1 / 3 / 1000, C = 7*3, one channel a group, one group
    ((3, 24), 4), ((1, 21), 7), ((1000, 21), 21), ((3, 21, 17), 3), ((1, 8, 33), 1), ((3, 16, 9, 11), 16),
    ((1000, 6, 5), 2), ((2, 6, 3, 5, 7), 3), ((1, 4, 2, 3, 4), 1), ((2, 12, 8, 8), 4),
    ((4, 256), 8), ((3, 512), 4), ((2, 96), 3),  # rows: register kernel with 8 / 32 lanes a group; 32 ch a group
]


@pytest.mark.parametrize("chain", CHAINS, ids=lambda c: "|".join(c) or "plain")
@pytest.mark.parametrize("shape,G", SHAPES, ids=lambda v: str(v))
def test_chains_reductions_shapes(shape, G, chain):
    pre, post, reduce = chain
    check_gn(shape, G, pre, post, reduce, seed=sum(shape) + G)


@pytest.mark.parametrize("reduce", ["", "min", "logsumexp"])
@pytest.mark.parametrize("shape,G", [((2, 16, 130, 130), 2), ((3, 64, 66, 66), 8), ((2, 1, 70001), 1),
                                     ((2, 4, 4097), 2)])
def test_large_groups_split_over_blocks(shape, G, reduce):
    """Groups of 10^4-10^5 elements: the stats kernel writes per-chunk partials, combined with Chan's formula."""
    check_gn(shape, G, "gelu", "", reduce, seed=5)


def test_wide_rows_beyond_shared_memory():
    """S == 1 with C too large for the one-block-per-row kernel: the split kernels take over."""
    check_gn((3, 65536), 16, "", "relu", "", seed=6)
    check_gn((2, 65536), 1, "add(@0)", "", "max", seed=7)


@pytest.mark.parametrize("shape,G", [((3, 16, 33, 33), 4), ((7, 4096), 32), ((2, 8, 100000), 2)])
def test_large_mean_is_numerically_stable(shape, G):
    """mean 1000, std 1: E[x^2] - E[x]^2 in float32 would lose ~3 of 7 digits; Welford/Chan and two-pass do not."""
    check_gn(shape, G, seed=11, scale=1.0, shift=1000.0, tol=2e-3)


def test_misaligned_tensors_take_the_scalar_path():
    buf = torch.randn(1 + 3 * 12 * 40, generator=gen(3)).to(DEV)
    x = buf[1:].view(3, 12, 40)  # contiguous, 4 bytes past a 16-byte boundary
    gamma, beta, e0 = params(12, 1, 4)
    a = attrs(num_groups=3, pre="add(@0)", post="relu")
    assert_close(run_gn(x, gamma, beta, [e0], a), ref_gn(x, gamma, beta, [e0], a), TOL32)
    x2 = buf[1:].view(3 * 10, 48)  # row kernel, misaligned
    g2, b2 = params(48, 0, 5)
    a2 = attrs(num_groups=6, post="tanh", reduce="sum")
    assert_close(run_gn(x2, g2, b2, [], a2), ref_gn(x2, g2, b2, [], a2), TOL32)


def test_matches_eager_pytorch_float32():
    x = torch.randn(4, 32, 20, 20, generator=gen(8)).to(DEV) * 3
    gamma, beta = params(32, 0, 9)
    a = attrs(num_groups=8, pre="gelu", post="leaky_relu(0.1)")
    eager = F.leaky_relu(F.group_norm(F.gelu(x), 8, gamma, beta, 1e-5), 0.1)
    torch.testing.assert_close(run_gn(x, gamma, beta, [], a), eager, rtol=TOL32, atol=TOL32)


@pytest.mark.parametrize("layout", ["row", "fused", "split"])
def test_nan_and_inf_propagate_like_pytorch(layout):
    shape = {"row": (4, 32), "fused": (4, 32, 9), "split": (4, 32, 4000)}[layout]
    x = torch.randn(*shape, generator=gen(12))
    x[0, 3] = float("nan")     # NaN in group 0 of sample 0: that group is NaN
    x[1, 9] = float("inf")     # +inf through hardtanh is finite: sample 1 stays finite
    x[2, 20] = float("-inf")   # -inf through hardtanh too
    x = x.to(DEV)
    gamma, beta = params(32, 0, 13)
    for pre, post, reduce in [("hardtanh(-3,3)", "relu", ""), ("hardtanh(-3,3)", "hardtanh(-0.5,0.5)", "min"),
                              ("", "", ""), ("sigmoid", "", "logsumexp"), ("", "relu", "max")]:
        a = attrs(num_groups=4, pre=pre, post=post, reduce=reduce)
        got = run_gn(x, gamma, beta, [], a).cpu().double()
        want = ref_gn(x, gamma, beta, [], a)
        assert torch.equal(torch.isnan(got), torch.isnan(want)), f"NaN pattern differs for {pre}|{post}|{reduce}"
        assert torch.equal(torch.isinf(got), torch.isinf(want)), f"Inf pattern differs for {pre}|{post}|{reduce}"
        assert_close(got, want, TOL32, f"{pre}|{post}|{reduce}")


def test_nan_in_post_chain_operands_propagates_through_relu_and_clamp():
    x = torch.randn(2, 8, 5, generator=gen(14)).to(DEV)
    gamma, beta, e0 = params(8, 1, 15)
    e0[3] = float("nan")
    for post in ["add(@0);relu", "add(@0);hardtanh(-1,1)", "add(@0);leaky_relu(0.1)", "add(@0);hardswish"]:
        a = attrs(num_groups=2, post=post)
        got = run_gn(x, gamma, beta, [e0], a)
        assert torch.isnan(got[:, 3]).all() and not torch.isnan(got[:, [0, 1, 2, 4]]).any(), post


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape,G,chain", [((3, 32, 17, 19), 8, ("gelu", "", "")),
                                           ((1000, 64), 16, ("", "leaky_relu(0.01);mul(2)", "")),
                                           ((2, 16, 160, 160), 4, ("", "relu", "")),
                                           ((5, 48), 12, ("", "", "min")),
                                           ((3, 24, 30), 6, ("mish", "add(@0)", "logsumexp")),
                                           # S % 8 == 4: 8-byte vectors (model 4's 258 x 258 in 16-bit)
                                           ((2, 16, 130, 130), 4, ("gelu", "", "")),
                                           ((3, 8, 10, 30), 2, ("gelu", "tanh", ""))])
def test_16bit_no_worse_than_eager(dtype, shape, G, chain):
    pre, post, reduce = chain
    x32 = torch.randn(*shape, generator=gen(16)) * 3
    x = x32.to(DEV, dtype)
    gamma, beta, e0 = params(shape[1], 1, 17, dtype)
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
    want = ref_gn(x, gamma, beta, [e0], a)
    got = run_gn(x, gamma, beta, [e0], a)
    assert got.dtype == dtype and not torch.isnan(got).any()
    # eager PyTorch in the same dtype (GroupNorm upcasts internally, the chains run in 16-bit)
    z = catalog.apply_chain(x, a.pre, [e0])
    z = F.group_norm(z, G, gamma, beta, 1e-5)
    eager = catalog.apply_reduce(catalog.apply_chain(z, a.post, [e0]), reduce).to(dtype)
    err = (got.cpu().double() - want).abs().max().item()
    err_eager = (eager.cpu().double() - want).abs().max().item()
    print(f"[16-bit] {dtype} {shape} {chain}: max err fused {err:.3g}, eager {err_eager:.3g}")
    assert err <= 1.5 * err_eager + ULP16[dtype], (err, err_eager)


@pytest.mark.parametrize("shape,G,pre,post", [((2, 8, 45, 46), 2, "gelu", "tanh"),  # fused plan
                                              ((2, 8, 258, 259), 2, "gelu", ""),   # split plan
                                              ((2, 6, 7, 10), 3, "", "relu")])
def test_float32_half_width_vectors(shape, G, pre, post):
    """S % 4 == 2 (float32): 8-byte vectors of 2 instead of the scalar path; results as the float64 reference."""
    check_gn(shape, G, pre, post, n_extra=0)


def test_param_dtype_float32_with_16bit_input():
    x = (torch.randn(2, 16, 50, generator=gen(18)) * 2).to(DEV, torch.bfloat16)
    gamma, beta = params(16, 0, 19)  # float32 params with bf16 X
    a = attrs(num_groups=4, post="silu")
    got = run_gn(x, gamma, beta, [], a)
    assert_close(got, ref_gn(x, gamma, beta, [], a), 2.0**-6)


@pytest.mark.parametrize("rows", [0, 1, 3, 16])
@pytest.mark.parametrize("shape,G,chain,dtype", [
    ((1000, 8192), 512, ("", "leaky_relu(0.01);mul(2)", ""), torch.float32),    # model 1 rows, 8 slices
    ((1000, 8192), 512, ("", "leaky_relu(0.01);mul(2)", ""), torch.bfloat16),   # 4 slices: one wave of > 8 rows
    ((17, 8192), 512, ("", "add(@0)", "min"), torch.float32),                   # whole-row block, 4 vectors a thread
    ((5, 4096), 256, ("add(@0);hardtanh(-1,1);mish", "", "max"), torch.float32),  # 2 vectors a thread
    ((3, 2048), 64, ("", "relu", "sum"), torch.float32),                         # 1 vector a thread
    ((33, 96), 6, ("add(@0)", "gelu", ""), torch.float32),                        # partial warp, one slice
    ((1, 8192), 256, ("", "silu", ""), torch.float32),                            # one row
    ((19, 8192), 512, ("", "add(@0)", "min"), torch.bfloat16),                   # model 2 bf16: 2 vectors a thread
    ((40, 4096), 256, ("add(@0);hardtanh(-1,1);mish", "", ""), torch.float16),
])
def test_column_slice_epilogue_walks_rows(shape, G, chain, dtype, rows):
    """The default row epilogue keeps gamma/beta/extra of a column slice in registers and walks `rows` rows (the
    last row block partial); it must agree with the float64 reference and with the one-row kernel it replaced."""
    pre, post, reduce = chain
    x = (torch.randn(*shape, generator=gen(40)) * 2 + 0.3).to(DEV, dtype)
    gamma, beta, e0 = params(shape[1], 1, 41, dtype)
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
    got = run_gn(x, gamma, beta, [e0], a, abi.PlanOptions(epilogue_rows=rows))
    assert not torch.isnan(got).any(), "NaN left in the output: some element was not written"
    tol = TOL32 if dtype == torch.float32 else 4 * ULP16[dtype]
    assert_close(got, ref_gn(x, gamma, beta, [e0], a), tol, f"{shape} {chain} rows={rows}")
    old = run_gn(x, gamma, beta, [e0], a, abi.PlanOptions(epilogue_register=True))
    torch.testing.assert_close(got, old, rtol=TOL32 if dtype == torch.float32 else 2 * ULP16[dtype],
                               atol=TOL32 if dtype == torch.float32 else 2 * ULP16[dtype])


def _plan_kernels(x, gamma, beta, a, options=None) -> str:
    d, _ = abi.describe(abi.parse_attributes("GroupNormAct", a),
                        [abi.tensor_desc(t.dtype, tuple(t.shape)) for t in (x, gamma, beta)])
    return abi.Plan(d, x.device.index, options).kernels


@pytest.mark.parametrize("reduce", ["min", "max", "sum", "mean", "logsumexp"])
@pytest.mark.parametrize("shape,G,dtype,slices", [
    ((1, 8192), 512, torch.float32, 8),     # model 2 at batch 1: one cluster of 8 slices
    ((16, 8192), 512, torch.bfloat16, 4),   # model 2 rows in bfloat16: 4 slices of 8-element vectors
    ((1000, 8192), 256, torch.float32, 8),  # many clusters, each block walking several rows
    ((7, 4096), 128, torch.float16, 2),
    ((3, 2048), 64, torch.float32, 2),
    ((5, 512), 32, torch.float32, 1),       # one slice: no cluster
])
def test_row_reduction_by_a_cluster_of_slices(shape, G, dtype, slices, reduce):
    """A channel reduction of rows (model 2's min) cuts each row into slices whose partials one thread-block cluster
    combines (sm_90): equal to the float64 reference (NaN propagated from a poisoned element) and to the whole-row
    block it replaced (option reduce_whole_row)."""
    x = (torch.randn(*shape, generator=gen(60)) * 2 + 0.3).to(DEV, dtype)
    x[0, shape[1] // 3] = float("nan")
    gamma, beta = params(shape[1], 0, 61, dtype)
    a = attrs(num_groups=G, post="silu", reduce=reduce)
    kernels = _plan_kernels(x, gamma, beta, a)
    on_hopper = torch.cuda.get_device_capability(DEV)[0] >= 9
    assert (",cluster" in kernels) == (on_hopper and slices > 1), kernels
    assert f"slices={slices if on_hopper else 1}" in kernels, kernels
    whole = abi.PlanOptions(reduce_whole_row=True)
    assert "cluster" not in _plan_kernels(x, gamma, beta, a, whole)
    got = run_gn(x, gamma, beta, [], a)
    assert got.shape == (shape[0], 1)  # keepdim, as torch's min(dim=1, keepdim=True)
    tol = dict(rtol=TOL32, atol=TOL32) if dtype == torch.float32 else dict(rtol=2.0**-7, atol=4 * ULP16[dtype])
    want = ref_gn(x, gamma, beta, [], a)
    torch.testing.assert_close(got.cpu().double(), want, equal_nan=True, **tol)
    assert torch.isnan(got[0, 0]) and not torch.isnan(got[1:]).any()
    torch.testing.assert_close(got, run_gn(x, gamma, beta, [], a, whole), equal_nan=True, **tol)


@pytest.mark.parametrize("shape,G,chain,dtype", [
    ((2, 16, 160, 160), 4, ("gelu", "", ""), torch.float32),                       # 7 chunks a group
    ((1, 8, 258, 258), 1, ("", "", ""), torch.float32),                            # batch 1, one group of 33 chunks
    ((40, 8, 128, 130), 2, ("mul(@0)", "add(@1);tanh", ""), torch.float32),         # 400 tickets: many waves
    ((3, 64, 66, 66), 8, ("gelu", "", ""), torch.bfloat16),                         # S % 8 == 4: half-width vectors
    ((2, 8, 129, 131), 2, ("silu", "hardtanh(-1,1)", ""), torch.float16),           # S odd: scalar path
])
def test_one_pass_groupnorm_matches_two_pass_and_float64(shape, G, chain, dtype):
    """Large groups run in one persistent pass (chunks kept in shared memory, group statistics exchanged through
    the workspace): same results as the two-pass kernels (groupnorm_two_pass) and the float64 reference, and
    identical bits from run to run (the partials are combined in a fixed order, whatever order chunks finish in)."""
    pre, post, reduce = chain
    x = (torch.randn(*shape, generator=gen(50)) * 2 + 0.5).to(DEV, dtype)
    gamma, beta, e0, e1 = params(shape[1], 2, 51, dtype)
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
    one = run_gn(x, gamma, beta, [e0, e1], a)
    again = run_gn(x, gamma, beta, [e0, e1], a)
    two = run_gn(x, gamma, beta, [e0, e1], a, abi.PlanOptions(groupnorm_two_pass=True))
    assert not torch.isnan(one).any(), "NaN left in the output: some element was not written"
    assert torch.equal(one, again), "one-pass results differ between runs"
    want = ref_gn(x, gamma, beta, [e0, e1], a)
    tol = TOL32 if dtype == torch.float32 else 2 * ULP16[dtype]
    assert_close(one, want, tol, f"one-pass {shape}")
    torch.testing.assert_close(one, two, rtol=tol, atol=tol)


def test_one_pass_on_two_streams_at_once():
    """Two one-pass launches in flight on two streams use their own workspaces (counters, tickets): both right."""
    xs = [(torch.randn(4, 16, 128, 128, generator=gen(52 + i)) * 3).to(DEV) for i in range(2)]
    gamma, beta = params(16, 0, 54)
    a = attrs(num_groups=4, pre="gelu")
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [poisoned(tuple(x.shape), x.dtype) for x in xs]
    torch.cuda.synchronize()
    for _ in range(5):
        for x, out, st in zip(xs, outs, streams):
            abi.groupnorm_act_cuda(x, gamma, beta, [], a, out=out, stream=st)
    torch.cuda.synchronize()
    for x, out in zip(xs, outs):
        assert_close(out, ref_gn(x, gamma, beta, [], a), TOL32, "two streams")


def test_fast_gelu_matches_erff_gelu_and_float64():
    """Model 4's GELU pre chain runs gelu_fast (polynomial + ex2) by default; gelu_erff the erff form. Both
    against float64 at 1e-4 and each other at 1e-5 (split and fused layouts), on data reaching |x| = 12."""
    for shape, G in [((2, 16, 130, 130), 2), ((3, 16, 9, 11), 4)]:
        x = (torch.randn(*shape, generator=gen(42)) * 3).to(DEV)
        x.view(-1)[:50] = torch.linspace(-12, 12, 50, device=DEV)
        gamma, beta = params(shape[1], 0, 43)
        a = attrs(num_groups=G, pre="gelu")
        fast = run_gn(x, gamma, beta, [], a)
        old = run_gn(x, gamma, beta, [], a, abi.PlanOptions(gelu_erff=True))
        want = ref_gn(x, gamma, beta, [], a)
        assert_close(fast, want, TOL32, f"fast {shape}")
        assert_close(old, want, TOL32, f"erff {shape}")
        torch.testing.assert_close(fast, old, rtol=1e-5, atol=1e-5)


def test_fast_gelu_propagates_nan_and_inf_like_pytorch():
    """GELU(+inf) = inf, GELU(-inf) = NaN (inf * 0 in PyTorch's formula), GELU(NaN) = NaN: the affected group."""
    x = torch.randn(4, 32, 4000, generator=gen(44))
    x[0, 3, 7] = float("nan")
    x[1, 9, 100] = float("inf")
    x[2, 20, 5] = float("-inf")
    x = x.to(DEV)
    gamma, beta = params(32, 0, 45)
    for post in ["", "hardtanh(-1,1)"]:
        a = attrs(num_groups=4, pre="gelu", post=post)
        got = run_gn(x, gamma, beta, [], a).cpu().double()
        want = ref_gn(x, gamma, beta, [], a)
        assert torch.equal(torch.isnan(got), torch.isnan(want)), f"NaN pattern differs (post={post!r})"
        assert torch.equal(torch.isinf(got), torch.isinf(want)), f"Inf pattern differs (post={post!r})"
        assert_close(got, want, TOL32, post)


def test_runs_on_a_side_stream_and_allocates_output():
    x = torch.randn(8, 32, 64, generator=gen(20)).to(DEV)
    gamma, beta = params(32, 0, 21)
    a = attrs(num_groups=4, pre="gelu")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = abi.groupnorm_act_cuda(x, gamma, beta, [], a)
    y2 = abi.groupnorm_act_cuda(x, gamma, beta, [], a, stream=s)
    torch.cuda.current_stream().wait_stream(s)
    want = ref_gn(x, gamma, beta, [], a)
    assert_close(y, want, TOL32)
    assert_close(y2, want, TOL32)


def test_bad_inputs_raise_clear_errors():
    x = torch.randn(2, 12, 5, device=DEV)
    gamma, beta, e0 = params(12, 1, 22)
    with pytest.raises(FusedopsError, match="divisible"):
        abi.groupnorm_act_cuda(x, gamma, beta, [], attrs(num_groups=5))
    with pytest.raises(FusedopsError, match="gamma has 11 elements"):
        abi.groupnorm_act_cuda(x, gamma[:11], beta, [], attrs(num_groups=3))
    with pytest.raises(FusedopsError, match="extra input"):
        abi.groupnorm_act_cuda(x, gamma, beta, [], attrs(num_groups=3, pre="add(@0)"))
    with pytest.raises(FusedopsError, match="CUDA tensor"):
        abi.groupnorm_act_cuda(x.cpu(), gamma, beta, [], attrs(num_groups=3))
    with pytest.raises(FusedopsError, match="out has shape"):
        abi.groupnorm_act_cuda(x, gamma, beta, [], attrs(num_groups=3), out=torch.empty(2, 12, device=DEV))
    with pytest.raises(FusedopsError, match="rank 2-5"):
        abi.groupnorm_act_cuda(x[0, 0], gamma, beta, [], attrs(num_groups=3))


def test_c_abi_plan_reports_workspace_and_null_pointer_errors():
    a = attrs(num_groups=2)
    d, _ = abi.describe(abi.parse_attributes("GroupNormAct", a),
                        [abi.tensor_desc(torch.float32, (2, 8, 100000))] + [abi.tensor_desc(torch.float32, (8,))] * 2)
    plan = abi.Plan(d, 0)  # split path: needs a workspace
    assert plan.workspace > 0 and plan.workspace == abi.workspace_size(d)
    x = torch.randn(2, 8, 100000, device=DEV)
    y = torch.empty_like(x)
    g, b = params(8, 0, 23)
    ws = torch.empty(plan.workspace, dtype=torch.uint8, device=DEV)
    stream = torch.cuda.current_stream().cuda_stream
    with pytest.raises(FusedopsError, match="workspace of"):
        plan.run([x.data_ptr(), g.data_ptr(), b.data_ptr()], y.data_ptr(), ws.data_ptr(), plan.workspace - 1, stream)
    with pytest.raises(FusedopsError, match="X pointer is NULL"):
        plan.run([None, g.data_ptr(), b.data_ptr()], y.data_ptr(), ws.data_ptr(), plan.workspace, stream)
    plan.run([x.data_ptr(), g.data_ptr(), b.data_ptr()], y.data_ptr(), ws.data_ptr(), plan.workspace, stream)
    assert_close(y, ref_gn(x, g, b, [], a), TOL32)


def test_plans_name_their_kernels():
    """The planner's choices, as fusedops_plan_kernels reports them, for the layouts the other tests exercise."""
    def kernels(shape, G, **kw):
        d, _ = abi.describe(abi.parse_attributes("GroupNormAct", attrs(num_groups=G, **kw)),
                            [abi.tensor_desc(torch.float32, shape)] + [abi.tensor_desc(torch.float32, (shape[1],))] * 2)
        return abi.Plan(d, 0).kernels

    assert kernels((1024, 8192), 512).startswith("gn_row_tile")
    assert kernels((1024, 8192), 512, reduce="min").startswith("gn_row_tile")
    assert kernels((3, 16, 9, 11), 4).startswith("gn_group_fused")
    assert kernels((128, 64, 258, 258), 8, pre="gelu").startswith("gn_onepass(vec4,pre=gelu_fast")
    assert "misaligned" in kernels((3, 16, 9, 12), 4)
