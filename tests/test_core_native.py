"""The native core (plugins/csrc/core) through the C ABI: chain parser vs the catalog's, descriptor checks, and the
CPU kernels vs the catalog's float64 reference over chains, reductions, ranks and dtypes (outputs NaN-poisoned first).

Builds libfusedops.so with CMake (scripts/get_native_deps.sh fetches Eigen when missing); skips with the reason when
no compiler / cmake / headers are available.
"""

from __future__ import annotations

import ctypes
import math
import zlib

import pytest
import torch

from fusedops import catalog
from fusedops.errors import FusedopsError
from native_support import built_abi


@pytest.fixture(scope="module")
def abi():
    return built_abi("the native core")


# ---------------------------------------------------------------------------------------------------------------------
# Parser: accepts exactly what the catalog accepts, with the same steps / parameters
# ---------------------------------------------------------------------------------------------------------------------

GOOD_CHAINS = [
    "", "   ", "relu", "relu()", " relu ; mish ", "add(@0);hardtanh(-1,1);mish", "leaky_relu(0.2);mul(2)",
    "leaky_relu", "swish", "clip(0,6)", "clip(-inf, inf)", "hardtanh(-2)", "hardsigmoid", "hardsigmoid(0.2,0.5)",
    "softplus(2,10)", "gelu;gelu_tanh;sigmoid;silu;tanh;hardswish", "sub(1.5e-3)", "div(@7)", "rsub(+1)",
    "rdiv(.5)", "mul(1E+2)", "add(-inf)", "add(@01)", "add ( 3 )", "mul(-0.)", "relu\t;\tgelu", "add(1\n)",
    ";".join(["relu"] * 16),
]
BAD_CHAINS = [
    "relu;", ";relu", "relu;;gelu", "Relu", "relu2", "foo", "add", "add()", "add(1,2)", "relu(1)", "leaky_relu(1,2)",
    "hardtanh(1,2,3)", "add(@8)", "add(@)", "add(@x)", "add(@-1)", "mul(nan)", "mul(inf1)", "mul(1e)", "mul(.)",
    "mul(1 .5)", "mul(--1)", "hardtanh(,1)", "add((1))", "add(1))", "relu)", "relu(", "mish(", "gelu(1", "add(0x10)",
    ";".join(["relu"] * 17), "mul(1e400)", "add(Inf)", "add(@99999999999999999999)",
]


def _native_steps(ch) -> list[tuple]:
    return [(ch.steps[i].op, ch.steps[i].operand, ch.steps[i].a, ch.steps[i].b) for i in range(ch.num_steps)]


def _f32(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float32))


def _catalog_steps(text: str) -> list[tuple]:
    out = []
    for s in catalog.parse_chain(text):
        if s.kind.binary:
            if isinstance(s.operand, int) and not isinstance(s.operand, bool):
                out.append((s.kind.code, s.operand, 0.0, 0.0))
            else:
                out.append((s.kind.code, -1, _f32(s.operand), 0.0))
        else:
            p = list(s.params) + [0.0, 0.0]
            out.append((s.kind.code, -1, _f32(p[0]), _f32(p[1])))
    return out


@pytest.mark.parametrize("text", GOOD_CHAINS)
def test_parser_accepts_what_the_catalog_accepts(abi, text):
    want = _catalog_steps(text)
    got = _native_steps(abi.parse_chain(text))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[:2] == w[:2]
        for a, b in zip(g[2:], w[2:]):
            assert a == b or (math.isnan(a) and math.isnan(b)), (text, got, want)


@pytest.mark.parametrize("text", BAD_CHAINS)
def test_parser_rejects_what_the_catalog_rejects(abi, text):
    with pytest.raises(catalog.CatalogError):
        catalog.parse_chain(text)
    with pytest.raises(FusedopsError) as ei:
        abi.parse_chain(text)
    msg = str(ei.value)
    assert "fusedops_parse_chain" in msg and len(msg) > len("fusedops_parse_chain: ") + 10


def test_parser_error_names_the_bad_step(abi):
    with pytest.raises(FusedopsError, match="frobnicate"):
        abi.parse_chain("relu;frobnicate(2)")
    with pytest.raises(FusedopsError, match="malformed number '1x'.*hardtanh"):
        abi.parse_chain("hardtanh(1x)")
    with pytest.raises(FusedopsError, match="17 steps"):
        abi.parse_chain(";".join(["relu"] * 17))


@pytest.mark.parametrize("text,code", [("", 0), ("min", 1), ("max", 2), ("sum", 3), ("mean", 4),
                                       ("logsumexp", 5), (" max ", 2), ("avg", None), ("MIN", None)])
def test_parse_reduce_matches_catalog(abi, text, code):
    lib = abi.load()
    out, err = ctypes.c_int32(-7), ctypes.create_string_buffer(256)
    rc = lib.fusedops_parse_reduce(text.encode(), ctypes.byref(out), err, 256)
    if code is None:
        with pytest.raises(catalog.CatalogError):
            catalog.parse_reduce(text)
        assert rc == abi.ERR_INVALID_ARGUMENT and b"unknown reduce" in err.value
    else:
        assert catalog.REDUCE_CODES[catalog.parse_reduce(text)] == code
        assert rc == abi.OK and out.value == code


def test_num_extras(abi):
    lib = abi.load()
    pre, post = abi.parse_chain("add(@2);mul(3)"), abi.parse_chain("sub(@5)")
    assert lib.fusedops_num_extras(ctypes.byref(pre), ctypes.byref(post)) == 6
    empty = abi.parse_chain("")
    assert lib.fusedops_num_extras(ctypes.byref(empty), ctypes.byref(empty)) == 0


# ---------------------------------------------------------------------------------------------------------------------
# Descriptor checks
# ---------------------------------------------------------------------------------------------------------------------

def _gn_desc(abi, **kw):
    """A complete GroupNormAct descriptor (the op descriptor's gn part), fields overridable."""
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": kw.pop("G", 4), "pre": kw.pop("pre", ""),
                                             "post": kw.pop("post", "")})
    d = abi.parse_attributes("GroupNormAct", a).d.gn
    d.N, d.C, d.S, d.x_dtype, d.param_dtype = kw.pop("N", 2), kw.pop("C", 8), kw.pop("S", 3), abi.F32, abi.F32
    for k, v in kw.items():
        setattr(d, k, v)
    return d


def _gemm_desc(abi, M=3, C=8, K=5, **attrs):
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": 4, **attrs})
    d = abi.parse_attributes("GemmGroupNormAct", a).d
    d.gn.N, d.gn.C, d.gn.S, d.K, d.gn.x_dtype, d.gn.param_dtype = M, C, 1, K, abi.F32, abi.F32
    return d


@pytest.mark.parametrize("field,value,needle", [
    ("N", 0, "must all be positive"), ("C", -1, "must all be positive"), ("S", 0, "must all be positive"),
    ("num_groups", 3, "not divisible by num_groups=3"), ("num_groups", 0, "num_groups must be positive"),
    ("epsilon", -1e-5, "epsilon"), ("epsilon", float("inf"), "epsilon"), ("epsilon", float("nan"), "epsilon"),
    ("reduce", 9, "reduce"), ("x_dtype", 7, "x_dtype"), ("param_dtype", -1, "param_dtype"),
])
def test_groupnorm_check_rejects(abi, field, value, needle):
    lib = abi.load()
    d = _gn_desc(abi, **{field: value})
    err = ctypes.create_string_buffer(256)
    rc = lib.fusedops_groupnorm_act_check(ctypes.byref(d), err, 256)
    assert rc in (abi.ERR_INVALID_ARGUMENT, abi.ERR_UNSUPPORTED)
    assert needle in err.value.decode()


def test_checks_accept_valid_and_gemm_specific_fields(abi):
    lib = abi.load()
    err = ctypes.create_string_buffer(256)
    d = _gn_desc(abi)
    assert lib.fusedops_groupnorm_act_check(ctypes.byref(d), err, 256) == abi.OK
    g = _gemm_desc(abi)
    assert lib.fusedops_gemm_groupnorm_act_check(ctypes.byref(g), err, 256) == abi.OK
    g.K = 0  # valid: X·Wᵀ is zero, Y depends on the bias only
    assert lib.fusedops_gemm_groupnorm_act_check(ctypes.byref(g), err, 256) == abi.OK
    for field, value, needle in [("K", -1, "K=-1"), ("trans_b", 2, "trans_b"), ("allow_tf32", 5, "allow_tf32")]:
        g2 = _gemm_desc(abi)
        setattr(g2, field, value)
        assert lib.fusedops_gemm_groupnorm_act_check(ctypes.byref(g2), err, 256) == abi.ERR_INVALID_ARGUMENT
        assert needle in err.value.decode()
    g.gn.S = 4
    assert lib.fusedops_gemm_groupnorm_act_check(ctypes.byref(g), err, 256) == abi.ERR_INVALID_ARGUMENT


def test_run_rejects_missing_extras(abi):
    lib = abi.load()
    d = _gn_desc(abi, pre="add(@1)")
    x = torch.randn(2, 8, 3)
    g, b, y = torch.ones(8), torch.zeros(8), torch.empty(2, 8, 3)
    err = ctypes.create_string_buffer(256)
    extras = (ctypes.c_void_p * 1)(torch.ones(8).data_ptr())
    rc = lib.fusedops_groupnorm_act_cpu(ctypes.byref(d), x.data_ptr(), g.data_ptr(), b.data_ptr(), extras, 1,
                                        y.data_ptr(), err, 256)
    assert rc == abi.ERR_INVALID_ARGUMENT and "reference 2 extra input(s), got 1" in err.value.decode()


# ---------------------------------------------------------------------------------------------------------------------
# CPU kernels vs the float64 reference
# ---------------------------------------------------------------------------------------------------------------------

TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (6e-2, 6e-2)}

GN_CASES = [
    # shape, groups, pre, post, reduce
    ((3, 12, 14, 18), 4, "gelu", "", ""),
    ((2, 6, 5), 3, "add(@0);hardtanh(-1,1);mish", "leaky_relu(0.2);mul(2)", ""),
    ((4, 16), 4, "", "relu", ""),
    ((2, 8, 3, 4, 5), 2, "sub(@1)", "silu;div(@0)", ""),
    ((2, 12, 7, 9), 3, "", "", "min"),
    ((2, 12, 7, 9), 6, "relu", "sigmoid", "logsumexp"),
    ((3, 10, 300), 5, "", "tanh", "sum"),
    ((3, 10, 300), 1, "softplus(2,10)", "hardswish", "mean"),
    ((2, 4, 2000), 2, "gelu_tanh", "hardsigmoid", "max"),
    ((1, 32, 64, 40), 8, "mul(3);add(100)", "clip(-2,inf)", ""),  # large mean: stable statistics
    ((1, 4, 200, 200), 1, "add(@0)", "mul(@1);gelu", ""),         # one big group: split across threads
    ((1, 6, 150, 150), 2, "sub(@0)", "tanh", "mean"),              # split statistics + channel reduction
    ((2, 3, 70, 300), 1, "", "", "logsumexp"),
]


def _rand(shape, dtype, gen, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", GN_CASES, ids=lambda c: f"{c[0]}-{c[2] or '_'}-{c[3] or '_'}-{c[4] or '_'}")
def test_groupnorm_act_cpu_matches_float64_reference(abi, case, dtype):
    shape, G, pre, post, reduce = case
    gen = torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))  # stable across runs
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": G, "pre": pre, "post": post, "reduce": reduce})
    C = shape[1]
    x = _rand(shape, dtype, gen, 2.0, 0.5)
    gamma, beta = _rand((C,), dtype, gen, 1.0, 1.0), _rand((C,), dtype, gen)
    extras = [_rand((C,), dtype, gen).abs() + 0.5 for _ in range(a.num_extras)]
    ref = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [e.double() for e in extras], a)
    out = torch.full(ref.shape, float("nan"), dtype=dtype)
    y = abi.groupnorm_act_cpu(x, gamma, beta, extras, a, out=out)
    assert y.data_ptr() == out.data_ptr() and not torch.isnan(y).any()
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(y.double(), ref.to(dtype).double(), rtol=rtol, atol=atol)


GEMM_CASES = [
    # M, K, C, groups, pre, post, reduce, trans_b
    (12, 96, 160, 10, "", "leaky_relu;mul(2)", "", 1),       # model 1 structure
    (12, 96, 160, 10, "", "", "min", 1),                      # model 2
    (12, 96, 160, 5, "add(@0);hardtanh;mish", "", "", 1),     # model 3
    (1, 33, 24, 4, "", "gelu", "", 1),                        # batch 1: column-split GEMM
    (3, 50, 40, 8, "relu", "", "logsumexp", 0),               # W as (K, C)
    (67, 70, 48, 6, "mul(@1)", "sub(@0)", "sum", 0),          # odd sizes, row blocks
    (9, 128, 4096, 2, "", "", "mean", 1),                     # groups of 2048 channels
]


@pytest.fixture(params=["blas", "eigen"])
def gemm_backend(abi, request):
    """The CPU GEMM behind the kernel: the scipy-openblas32 wheel's OpenBLAS (extra cpu-blas) or Eigen's."""
    from fusedops.plugins import cpu_blas

    choice = "eigen" if request.param == "eigen" else cpu_blas.scipy_openblas_library()
    if choice is None:
        pytest.skip("scipy-openblas32 is not installed (extra cpu-blas; scripts/dev.sh installs it)")
    used = abi.set_cpu_blas(choice)
    assert used.startswith("OpenBLAS" if request.param == "blas" else "Eigen"), used
    yield request.param
    abi.set_cpu_blas(cpu_blas.default_choice())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: f"M{c[0]}K{c[1]}C{c[2]}-{c[6] or '_'}-tb{c[7]}")
def test_gemm_groupnorm_act_cpu_matches_float64_reference(abi, gemm_backend, case, dtype):
    M, K, C, G, pre, post, reduce, trans_b = case
    gen = torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))  # stable across runs
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": G, "pre": pre, "post": post, "reduce": reduce,
                                                 "trans_b": trans_b})
    x = torch.rand(M, K, generator=gen, dtype=torch.float64).to(dtype)
    w = (_rand((C, K) if trans_b else (K, C), torch.float64, gen) / math.sqrt(K)).to(dtype)
    b = _rand((C,), dtype, gen)
    gamma, beta = _rand((C,), dtype, gen, 1.0, 1.0), _rand((C,), dtype, gen)
    extras = [_rand((C,), dtype, gen).abs() + 0.5 for _ in range(a.num_extras)]
    ref = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(), beta.double(),
                                                [e.double() for e in extras], a)
    out = torch.full(ref.shape, float("nan"), dtype=dtype)
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, extras, a, out=out)
    assert not torch.isnan(y).any()
    rtol, atol = TOL[dtype]
    if dtype == torch.float32:
        rtol, atol = 1e-4, 1e-4  # K-long float32 dot products vs float64
    torch.testing.assert_close(y.double(), ref.to(dtype).double(), rtol=rtol, atol=atol)


def test_gemm_rank3_rows_and_mixed_param_dtype(abi):
    """X of rank 3 is a batch of rows; float32 parameters with float16 X (param_dtype differs)."""
    gen = torch.Generator().manual_seed(5)
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": 4, "post": "relu"})
    x = torch.rand(2, 5, 16, generator=gen).half()
    w = (torch.randn(8, 16, generator=gen) / 4).half()
    b, g, bt = torch.randn(8, generator=gen), torch.rand(8, generator=gen) + 0.5, torch.randn(8, generator=gen)
    ref = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), g.double(), bt.double(), [], a)
    y = abi.gemm_groupnorm_act_cpu(x.reshape(10, 16), w, b, g, bt, [], a)
    torch.testing.assert_close(y.reshape(2, 5, 8).double(), ref.half().double(), rtol=1e-2, atol=1e-2)


def test_nan_and_inf_propagate(abi):
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": 2, "post": "relu", "reduce": "max"})
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(11))
    x[1, 0, 2] = float("nan")
    ref = catalog.group_norm_act_reference(x.double(), torch.ones(4).double(), torch.zeros(4).double(), [], a)
    y = abi.groupnorm_act_cpu(x, torch.ones(4), torch.zeros(4), [], a)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))  # the NaN poisons its whole group of sample 1 only
    torch.testing.assert_close(y[0].double(), ref[0], rtol=2e-5, atol=2e-5)


def test_repeated_calls_are_deterministic(abi):
    """The thread pool splits work the same way every call: identical bits."""
    gen = torch.Generator().manual_seed(1)
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": 8, "post": "mish", "reduce": "sum"})
    x, w = torch.rand(64, 200, generator=gen), torch.randn(256, 200, generator=gen) / 15
    b, g, bt = torch.randn(256, generator=gen), torch.ones(256), torch.zeros(256)
    ys = [abi.gemm_groupnorm_act_cpu(x, w, b, g, bt, [], a) for _ in range(3)]
    assert all(torch.equal(ys[0], y) for y in ys[1:])


SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, 1e-30, -3.0, 25.0, 100.0, -100.0, 8.5, -8.5, 0.3, 3.0]


@pytest.mark.parametrize("step", ["sigmoid", "silu", "tanh", "mish", "softplus", "softplus(2,10)", "gelu",
                                  "gelu_tanh", "hardswish", "hardsigmoid(0.2,0.5)", "relu", "leaky_relu(0.1)",
                                  "hardtanh(-2,inf)", "rdiv(1)", "rsub(2)"])
def test_each_step_on_special_values(abi, step):
    """NaN / ±inf / overflow-range inputs through every step (vectorised Eigen math included) vs PyTorch.

    With gamma = 0 the GroupNorm output is beta, so beta carries the values into the post chain, one per channel."""
    vals = torch.tensor(SPECIAL)
    n = vals.numel()
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": n, "post": step})
    y = abi.groupnorm_act_cpu(torch.zeros(1, n, 1), torch.zeros(n), vals.clone(), [], a)
    ref = catalog.apply_chain(vals.double().reshape(1, n, 1), catalog.parse_chain(step), [])
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("reduce", ["min", "max", "sum", "mean", "logsumexp"])
def test_gemm_reduce_with_inf_and_nan_channels(abi, reduce):
    """Rows whose post chain yields ±inf (x / 0) or NaN reduce exactly as torch's amin / amax / sum / logsumexp."""
    gen = torch.Generator().manual_seed(9)
    C = 64
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": 4, "post": "div(@0)", "reduce": reduce})
    x, w = torch.rand(6, 32, generator=gen), torch.randn(C, 32, generator=gen) / 6
    b, g, bt = torch.randn(C, generator=gen), torch.rand(C, generator=gen) + 0.5, torch.randn(C, generator=gen)
    div = torch.rand(C, generator=gen) + 0.5
    div[[3, 40]] = 0.0  # ±inf in every row at channels 3 and 40
    x[4, 5] = float("nan")  # row 4 entirely NaN
    ref = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), g.double(), bt.double(),
                                                [div.double()], a)
    y = abi.gemm_groupnorm_act_cpu(x, w, b, g, bt, [div], a)
    torch.testing.assert_close(y.double(), ref, rtol=2e-5, atol=2e-5, equal_nan=True)


def test_poisoned_allocations_for_gpu_tests(abi, monkeypatch):
    """FUSEDOPS_POISON_OUTPUTS=1 (set by the GPU model tests) makes the binding's own outputs NaN and workspaces 0xFF."""
    monkeypatch.delenv("FUSEDOPS_POISON_OUTPUTS", raising=False)
    assert not abi.poisoning()
    monkeypatch.setenv("FUSEDOPS_POISON_OUTPUTS", "1")
    assert torch.isnan(abi._alloc((4, 3), torch.bfloat16, "cpu")).all()
    assert (abi._alloc(7, torch.uint8, "cpu") == 0xFF).all()
