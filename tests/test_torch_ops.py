"""The PyTorch custom ops on CPU: semantics against a float64 re-statement, opcheck, errors, precision switch."""

import math

import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog
from fusedops.errors import FusedopsError
from fusedops.plugins import torch_ops

gna, ggna, _ = torch_ops.load()  # the C++ ops (libfusedops_torch.so, built by `fusedops build-native`)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _params(C, n_extras=0, seed=1, dtype=torch.float32):
    g = _gen(seed)
    gamma = torch.randn(C, generator=g, dtype=dtype) + 1.0
    beta = torch.randn(C, generator=g, dtype=dtype)
    extras = [torch.randn(C, generator=g, dtype=dtype) for _ in range(n_extras)]
    return gamma, beta, extras


def _group_norm64(z, G, gamma, beta, eps):
    """GroupNorm written out in float64, per sample."""
    n, c = z.shape[:2]
    g = z.reshape(n, G, -1)
    mean = g.mean(-1, keepdim=True)
    var = ((g - mean) ** 2).mean(-1, keepdim=True)
    y = ((g - mean) / torch.sqrt(var + eps)).reshape(z.shape)
    shape = (1, c) + (1,) * (z.dim() - 2)
    return y * gamma.reshape(shape) + beta.reshape(shape)


# ---------------------------------------------------------------------------------------------------------------------
# Semantics
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 12), (2, 12, 7), (2, 12, 5, 6), (2, 12, 3, 4, 5)])
def test_group_norm_act_matches_float64_restatement(shape):
    x = torch.randn(*shape, generator=_gen(2)) * 3 + 0.5
    gamma, beta, (e0,) = _params(shape[1], 1)
    y = torch_ops.group_norm_act(x, gamma, beta, [e0], 4, 1e-5, "add(@0);gelu", "leaky_relu(0.2);mul(2)", "")
    x64, e64 = x.double(), e0.double()
    shape_c = (1, -1) + (1,) * (x.dim() - 2)
    z = F.gelu(x64 + e64.reshape(shape_c))
    z = _group_norm64(z, 4, gamma.double(), beta.double(), 1e-5)
    want = torch.where(z >= 0, z, 0.2 * z) * 2
    assert y.dtype == torch.float32 and y.shape == x.shape
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduce,fn", [("min", lambda z: z.amin(1, keepdim=True)),
                                       ("max", lambda z: z.amax(1, keepdim=True)),
                                       ("sum", lambda z: z.sum(1, keepdim=True)),
                                       ("mean", lambda z: z.mean(1, keepdim=True)),
                                       ("logsumexp", lambda z: torch.logsumexp(z, 1, keepdim=True))])
def test_gemm_group_norm_act_reductions(reduce, fn):
    g = _gen(3)
    x = torch.rand(5, 24, generator=g)
    w = torch.randn(16, 24, generator=g) / 5
    b = torch.randn(16, generator=g)
    gamma, beta, _ = _params(16)
    y = torch_ops.gemm_group_norm_act(x, w, b, gamma, beta, [], 4, 1e-5, "", "silu", reduce)
    z = x.double() @ w.double().T + b.double()
    want = fn(F.silu(_group_norm64(z, 4, gamma.double(), beta.double(), 1e-5)))
    assert y.shape == (5, 1)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)


def test_gemm_trans_b_0_and_batched_rows():
    g = _gen(4)
    x = torch.rand(2, 3, 10, generator=g)  # rank 3: a batch of rows, every row one sample
    w_kc = torch.randn(10, 8, generator=g)  # (K, C) layout
    b = torch.randn(8, generator=g)
    gamma, beta, _ = _params(8)
    y = torch_ops.gemm_group_norm_act(x, w_kc, b, gamma, beta, [], 2, 1e-5, "", "", "", 0)
    y_t = torch_ops.gemm_group_norm_act(x, w_kc.T.contiguous(), b, gamma, beta, [], 2, 1e-5, "", "", "", 1)
    z = (x.double().reshape(-1, 10) @ w_kc.double() + b.double())
    want = _group_norm64(z, 2, gamma.double(), beta.double(), 1e-5).reshape(2, 3, 8)
    assert y.shape == (2, 3, 8)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, y_t)


def test_group_norm_statistics_are_per_sample():
    x = torch.randn(4, 8, 9, generator=_gen(5))
    gamma, beta, _ = _params(8)
    y = torch_ops.group_norm_act(x, gamma, beta, [], 2)
    x2 = x.clone()
    x2[0] = x2[0] * 50 + 3
    y2 = torch_ops.group_norm_act(x2, gamma, beta, [], 2)
    torch.testing.assert_close(y[1:], y2[1:], rtol=0, atol=0)


def test_non_contiguous_inputs_give_the_contiguous_answer():
    g = _gen(6)
    x = torch.randn(12, 4, 7, generator=g).transpose(0, 1)  # (4, 12, 7), not contiguous
    gamma, beta, _ = _params(12)
    assert not x.is_contiguous()
    torch.testing.assert_close(torch_ops.group_norm_act(x, gamma, beta, [], 3),
                               torch_ops.group_norm_act(x.contiguous(), gamma, beta, [], 3))
    xg = torch.rand(16, 6, generator=g).T  # (6, 16)
    w = torch.randn(16, 8, generator=g).T  # (8, 16) = (C, K), non-contiguous
    b = torch.randn(8, generator=g)
    gm, bt, _ = _params(8)
    torch.testing.assert_close(torch_ops.gemm_group_norm_act(xg, w, b, gm, bt, [], 4),
                               torch_ops.gemm_group_norm_act(xg.contiguous(), w.contiguous(), b, gm, bt, [], 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_inputs_run_in_their_type(dtype):
    g = _gen(7)
    x = torch.rand(6, 32, generator=g)
    w = torch.randn(16, 32, generator=g) / 6
    b = torch.randn(16, generator=g)
    gamma, beta, _ = _params(16)
    y = torch_ops.gemm_group_norm_act(x.to(dtype), w.to(dtype), b.to(dtype), gamma.to(dtype), beta.to(dtype), [],
                                      4, 1e-5, "", "gelu", "")
    assert y.dtype == dtype
    want = torch_ops.gemm_group_norm_act(x.to(dtype).double(), w.to(dtype).double(), b.to(dtype).double(),
                                         gamma.to(dtype).double(), beta.to(dtype).double(), [], 4, 1e-5, "", "gelu")
    # The GEMM output is rounded to the 16-bit type before GroupNorm divides by a group std of ~0.3: ~3 ulp of it.
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    torch.testing.assert_close(y.double(), want, rtol=tol, atol=tol)


def test_nan_and_inf_propagate_per_sample():
    x = torch.randn(3, 8, 5, generator=_gen(8))
    x[1, 0, 0] = float("nan")
    x[2, 5, 1] = float("inf")
    gamma, beta, _ = _params(8)
    y = torch_ops.group_norm_act(x, gamma, beta, [], 2)
    want = F.group_norm(x, 2, gamma, beta, 1e-5)
    torch.testing.assert_close(y, want, equal_nan=True)
    assert torch.isfinite(y[0]).all() and torch.isnan(y[1, :4]).all() and torch.isfinite(y[1, 4:]).all()


# ---------------------------------------------------------------------------------------------------------------------
# Precision switch
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision,want", [("highest", 0), ("high", 1), ("medium", 1)])
def test_allow_tf32_follows_float32_matmul_precision(precision, want):
    old = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision(precision)
        assert torch_ops.resolve_allow_tf32(-1) == want
        assert torch_ops.resolve_allow_tf32(0) == 0 and torch_ops.resolve_allow_tf32(1) == 1
    finally:
        torch.set_float32_matmul_precision(old)
    with pytest.raises(FusedopsError, match="allow_tf32 must be"):
        torch_ops.resolve_allow_tf32(2)


def test_parsed_attrs_are_cached():
    torch_ops.parsed_attrs.cache_clear()
    a = torch_ops.parsed_attrs("GroupNormAct", 4, 1e-5, "gelu", "", "")
    b = torch_ops.parsed_attrs("GroupNormAct", 4, 1e-5, "gelu", "", "")
    assert a is b and torch_ops.parsed_attrs.cache_info().hits == 1


# ---------------------------------------------------------------------------------------------------------------------
# opcheck (schema, fake kernel, dispatch, aot; no autograd formula: inputs do not require grad)
# ---------------------------------------------------------------------------------------------------------------------

GN_CASES = [
    ((4, 12), 3, "", "", ""),
    ((2, 12, 9), 12, "gelu", "", "min"),  # one channel a group
    ((2, 12, 5, 6), 1, "add(@0);hardtanh(-1,1);mish", "", ""),  # one group for all channels
    ((2, 12, 3, 4, 5), 4, "", "leaky_relu(0.1);mul(2)", "logsumexp"),
    ((3, 8, 4, 4), 2, "mul(@1);sub(@0)", "sigmoid;rsub(1)", "max"),
]


@pytest.mark.parametrize("shape,G,pre,post,reduce", GN_CASES)
def test_opcheck_group_norm_act(shape, G, pre, post, reduce):
    g = _gen(9)
    x = torch.randn(*shape, generator=g)
    gamma, beta, extras = _params(shape[1], 2)
    torch.library.opcheck(gna, (x, gamma, beta, extras, G, 1e-5, pre, post, reduce))


GEMM_CASES = [
    ((6, 16), (24, 16), 1, 6, "", "leaky_relu(0.01);mul(2)", ""),
    ((6, 16), (24, 16), 1, 8, "", "", "min"),
    ((5, 16), (16, 24), 0, 4, "add(@0);hardtanh(-1,1);mish", "", ""),
    ((2, 3, 16), (24, 16), 1, 24, "gelu_tanh", "hardswish", "mean"),
]


@pytest.mark.parametrize("xs,ws,trans_b,G,pre,post,reduce", GEMM_CASES)
def test_opcheck_gemm_group_norm_act(xs, ws, trans_b, G, pre, post, reduce):
    g = _gen(10)
    x, w = torch.rand(*xs, generator=g), torch.randn(*ws, generator=g) / 4
    C = ws[0] if trans_b else ws[1]
    b = torch.randn(C, generator=g)
    gamma, beta, extras = _params(C, 1)
    for tf32 in (-1, 0):
        torch.library.opcheck(ggna, (x, w, b, gamma, beta, extras, G, 1e-5, pre, post, reduce, trans_b, tf32))


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: clear errors that name the problem
# ---------------------------------------------------------------------------------------------------------------------

def _gn_args(**over):
    x = torch.randn(2, 12, 5)
    gamma, beta, extras = _params(12, 1)
    a = dict(x=x, gamma=gamma, beta=beta, extras=extras, num_groups=4, epsilon=1e-5, pre="", post="", reduce="")
    a.update(over)
    return a


@pytest.mark.parametrize("over,match", [
    (dict(num_groups=5), "C=12 is not divisible by num_groups=5"),
    (dict(num_groups=0), "num_groups must be positive"),
    (dict(gamma=torch.randn(11)), "gamma has 11 elements, expected C=12"),
    (dict(beta=torch.randn(13)), "beta has 13 elements"),
    (dict(pre="add(@1)"), r"chains reference 2 extra input\(s\)"),
    (dict(pre="frobnicate"), "unknown chain step 'frobnicate'"),
    (dict(post="leaky_relu(0.1,2,3)"), "takes at most 1 parameter"),
    (dict(reduce="median"), "unknown reduce 'median'"),
    (dict(epsilon=-1.0), "epsilon must be a finite non-negative"),
    (dict(x=torch.randn(12)), "X must have rank 2-5"),
    (dict(x=torch.randn(1, 12, 2, 2, 2, 2)), "X must have rank 2-5"),
    (dict(x=torch.randint(0, 4, (2, 12, 5))), "X has dtype torch.int64"),
    (dict(extras=[torch.randn(7)]), "extra input 0 has 7 elements"),
])
def test_group_norm_act_bad_input(over, match):
    with pytest.raises(FusedopsError, match=match):
        torch_ops.group_norm_act(**_gn_args(**over))


def _gemm_args(**over):
    g = _gen(11)
    a = dict(x=torch.rand(4, 10, generator=g), w=torch.randn(8, 10, generator=g), b=torch.randn(8, generator=g),
             gamma=torch.ones(8), beta=torch.zeros(8), extras=[], num_groups=2)
    a.update(over)
    return a


@pytest.mark.parametrize("over,match", [
    (dict(w=torch.randn(8, 9)), r"X has K=10 features but W of shape \(8, 9\)"),
    (dict(w=torch.randn(8, 10, 1)), "W must be 2-D"),
    (dict(x=torch.rand(10)), "X must have rank >= 2"),
    (dict(b=torch.randn(7)), "bias B has 7 elements, expected C=8"),
    (dict(w=torch.randn(8, 10, dtype=torch.float64)), "W has dtype torch.float64; supported: float32, float16, bfloat16"),
    (dict(num_groups=3), "C=8 is not divisible by num_groups=3"),
    (dict(trans_b=2), "trans_b must be 0 or 1"),
    (dict(allow_tf32=5), "allow_tf32 must be"),
    (dict(gamma=torch.ones(8, dtype=torch.int32)), "gamma has dtype torch.int32"),
])
def test_gemm_group_norm_act_bad_input(over, match):
    with pytest.raises(FusedopsError, match=match):
        torch_ops.gemm_group_norm_act(**_gemm_args(**over))


def test_bad_input_is_caught_while_tracing():
    """The fake kernel validates too: export fails at trace time with the same message."""

    class Bad(torch.nn.Module):
        def forward(self, x):
            return torch_ops.group_norm_act(x, torch.ones(12), torch.zeros(12), [], 5)

    with pytest.raises(Exception, match="not divisible by num_groups=5"):
        torch.export.export(Bad(), (torch.randn(2, 12, 4),))


def test_chain_number_round_trips():
    for v in (0.01, -1.0, 1.0, 1 / 3, 1e-30, math.inf, -math.inf):
        text = torch_ops.chain_number(v)
        steps = torch_ops.parsed_attrs("GroupNormAct", 1, 1e-5, f"hardtanh(-inf,{text})", "", "").pre  # min <= max
        assert steps[0].params[1] == v


# ---------------------------------------------------------------------------------------------------------------------
# Autograd (backward recomputes through the reference math)
# ---------------------------------------------------------------------------------------------------------------------

def _leaf(*shape, seed, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=_gen(seed), dtype=torch.float64) * scale + shift).requires_grad_()


@pytest.mark.parametrize("pre,post,reduce,G", [("", "", "", 4), ("add(@0);gelu", "leaky_relu(0.2);mul(2)", "", 2),
                                               ("", "silu", "min", 4), ("mul(@0)", "", "logsumexp", 12)])
def test_group_norm_act_gradcheck(pre, post, reduce, G):
    x, gamma, beta, e0 = _leaf(2, 12, 5, seed=20), _leaf(12, seed=21, shift=1), _leaf(12, seed=22), _leaf(12, seed=23)
    torch.autograd.gradcheck(lambda x, g, b, e: torch_ops.group_norm_act(x, g, b, [e], G, 1e-5, pre, post, reduce),
                             (x, gamma, beta, e0))


@pytest.mark.parametrize("trans_b", [1, 0])
@pytest.mark.parametrize("chain", [("", "leaky_relu(0.01);mul(2)", ""), ("", "", "min"),
                                   ("add(@0);hardtanh(-1,1);mish", "", "")])
def test_gemm_group_norm_act_gradcheck(chain, trans_b):
    pre, post, reduce = chain
    x, b, gamma, beta, e0 = (_leaf(3, 10, seed=24), _leaf(8, seed=25), _leaf(8, seed=26, shift=1), _leaf(8, seed=27),
                             _leaf(8, seed=28))
    w = _leaf(*((8, 10) if trans_b else (10, 8)), seed=29, scale=0.3)
    torch.autograd.gradcheck(
        lambda *t: torch_ops.gemm_group_norm_act(*t[:5], [t[5]], 2, 1e-5, pre, post, reduce, trans_b),
        (x, w, b, gamma, beta, e0))


def test_opcheck_with_gradients():
    g = _gen(30)
    x = torch.randn(2, 12, 7, generator=g, requires_grad=True)
    gamma, beta, (e0,) = _params(12, 1)
    for t in (gamma, beta, e0):
        t.requires_grad_()
    torch.library.opcheck(gna, (x, gamma, beta, [e0], 4, 1e-5, "add(@0);gelu", "", ""))
    xg = torch.rand(5, 16, generator=g, requires_grad=True)
    w = (torch.randn(24, 16, generator=g) / 4).requires_grad_()
    b = torch.randn(24, generator=g, requires_grad=True)
    gm, bt, _ = _params(24)
    torch.library.opcheck(ggna, (xg, w, b, gm, bt, [], 6, 1e-5, "", "leaky_relu(0.01);mul(2)", "", 1, -1))


def test_double_backward_differentiates_the_recomputation():
    """create_graph=True: the backward stays differentiable (second derivatives checked numerically)."""
    x, gamma, beta = _leaf(2, 8, 3, seed=40), _leaf(8, seed=41, shift=1), _leaf(8, seed=42)
    torch.autograd.gradgradcheck(lambda x, g, b: torch_ops.group_norm_act(x, g, b, [], 4, 1e-5, "", "silu", ""),
                                 (x, gamma, beta))
    xg, w, b = _leaf(3, 6, seed=43), _leaf(8, 6, seed=44, scale=0.3), _leaf(8, seed=45)
    torch.autograd.gradgradcheck(
        lambda *t: torch_ops.gemm_group_norm_act(*t, gamma.detach(), beta.detach(), [], 2, 1e-5, "", "gelu", ""),
        (xg, w, b))


# ---------------------------------------------------------------------------------------------------------------------
# Plans: cached per configuration in C++, keyed by everything they depend on
# ---------------------------------------------------------------------------------------------------------------------

def test_plan_cache_gives_each_configuration_its_own_plan():
    """Two attribute sets, two shapes and two dtypes in one process: each call matches its own reference, and a bad
    shape after good ones still fails with the shape named."""
    g = _gen(50)
    before = torch_ops.plan_cache_size()
    cases = []
    for shape in ((2, 8, 5), (3, 8, 7)):
        for dtype in (torch.float32, torch.bfloat16):
            for pre, post in (("", "relu"), ("gelu", "mul(2)")):
                x = (torch.randn(*shape, generator=g) * 2).to(dtype)
                gamma, beta, _ = _params(8, 0, 51, dtype)
                cases.append((x, gamma, beta, pre, post))
    for _ in range(2):  # the second round hits the cache
        for x, gamma, beta, pre, post in cases:
            y = torch_ops.group_norm_act(x, gamma, beta, [], 4, 1e-5, pre, post, "")
            a = torch_ops.parsed_attrs("GroupNormAct", 4, 1e-5, pre, post, "")
            want = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [], a)
            tol = 2e-5 if x.dtype == torch.float32 else 2e-2
            torch.testing.assert_close(y.double(), want.to(x.dtype).double(), rtol=tol, atol=tol)
    assert torch_ops.plan_cache_size() - before == len(cases)
    with pytest.raises(FusedopsError, match="gamma has 7 elements, expected C=8"):
        torch_ops.group_norm_act(cases[0][0], torch.ones(7), torch.zeros(8), [], 4)
    with pytest.raises(FusedopsError, match="C=8 is not divisible by num_groups=3"):
        torch_ops.group_norm_act(cases[0][0], cases[0][1], cases[0][2], [], 3)


def test_empty_batch_and_zero_k():
    gamma, beta, _ = _params(8)
    y = torch_ops.group_norm_act(torch.empty(0, 8, 3), gamma, beta, [], 4)
    assert y.shape == (0, 8, 3)
    b = torch.randn(8, generator=_gen(52))
    y = torch_ops.gemm_group_norm_act(torch.empty(5, 0), torch.empty(8, 0), b, gamma, beta, [], 4)
    want = F.group_norm(b.expand(5, 8), 4, gamma, beta)
    torch.testing.assert_close(y, want)
    y = torch_ops.gemm_group_norm_act(torch.empty(0, 6), torch.randn(8, 6), b, gamma, beta, [], 4, reduce="min")
    assert y.shape == (0, 1)


def test_poisoned_outputs_are_overwritten():
    torch_ops.set_poison_outputs(True)
    try:
        x = torch.randn(3, 16, generator=_gen(53))
        gamma, beta, _ = _params(16)
        y = torch_ops.group_norm_act(x, gamma, beta, [], 4)
        assert not torch.isnan(y).any()
        torch.testing.assert_close(y, F.group_norm(x, 4, gamma, beta))
    finally:
        torch_ops.set_poison_outputs(False)


def test_plan_kernels_names_the_cpu_kernels():
    x = torch.randn(2, 8, 3)
    gamma, beta, _ = _params(8)
    assert torch_ops.plan_kernels(x, gamma, beta, [], 4).startswith("cpu")
    w = torch.randn(8, 5)
    assert "eigen" in torch_ops.plan_kernels(torch.randn(2, 5), gamma, beta, [], 4, w=w, b=torch.zeros(8))
