"""The C ABI's attribute parser, shape rules (fusedops_describe) and plans, on the CPU (CUDA plans: tests/gpu)."""

from __future__ import annotations

import ctypes

import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog
from fusedops.errors import FusedopsError
from fusedops.plugins import abi

GN, GEMM = catalog.GROUP_NORM_ACT.name, catalog.GEMM_GROUP_NORM_ACT.name


@pytest.fixture(scope="module", autouse=True)
def library():
    try:
        abi.load()
    except FusedopsError as e:
        pytest.skip(f"libfusedops is not built here: {e}")


def _attrs(op, **kw):
    return catalog.parse_attrs(op, {"num_groups": 4, **kw})


def _t(shape, dtype=torch.float32):
    return abi.tensor_desc(dtype, shape)


def _gn_inputs(x=(2, 8, 5), p=8, extras=0, dtype=torch.float32, pdtype=torch.float32):
    return [_t(x, dtype), _t((p,), pdtype), _t((p,), pdtype)] + [_t((p,), pdtype)] * extras


def _gemm_inputs(x=(3, 6), w=(8, 6), p=8, dtype=torch.float32, pdtype=torch.float32):
    return [_t(x, dtype), _t(w, dtype)] + [_t((p,), pdtype)] * 3


# ---------------------------------------------------------------------------------------------------------------------
# Shape rules
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x,reduce,want", [((2, 8, 5), "", (2, 8, 5)), ((2, 8, 3, 4), "max", (2, 1, 3, 4)),
                                           ((7, 8), "", (7, 8)), ((1, 8, 2, 2, 2), "sum", (1, 1, 2, 2, 2))])
def test_describe_group_norm_act_output_and_descriptor(x, reduce, want):
    d, shape = abi.describe(abi.parse_attributes(GN, _attrs(GN, reduce=reduce)), _gn_inputs(x))
    S = 1
    for s in x[2:]:
        S *= s
    assert shape == want
    assert (d.d.gn.N, d.d.gn.C, d.d.gn.S, d.d.gn.x_dtype, d.d.gn.param_dtype) == (x[0], 8, S, abi.F32, abi.F32)


@pytest.mark.parametrize("trans_b,w,reduce,want", [(1, (8, 6), "", (2, 3, 8)), (0, (6, 8), "min", (2, 3, 1))])
def test_describe_gemm_rows_of_any_rank(trans_b, w, reduce, want):
    a = _attrs(GEMM, trans_b=trans_b, reduce=reduce)
    d, shape = abi.describe(abi.parse_attributes(GEMM, a), _gemm_inputs(x=(2, 3, 6), w=w))
    assert shape == want and (d.d.gn.N, d.d.gn.C, d.d.K, d.d.gn.S) == (6, 8, 6, 1)


def test_describe_leaves_unknown_dims_unknown_and_checks_the_rest():
    """A dynamic batch (graph building) is fine; what is known is still checked."""
    d, shape = abi.describe(abi.parse_attributes(GN, _attrs(GN)), _gn_inputs((None, 8, None)))
    assert shape == (None, 8, None) and d.d.gn.N == -1 and d.d.gn.S == -1 and d.d.gn.C == 8
    with pytest.raises(FusedopsError, match="gamma has 7 elements, expected C=8"):
        abi.describe(abi.parse_attributes(GN, _attrs(GN)), [_t((None, 8, 3)), _t((7,)), _t((8,))])
    d, shape = abi.describe(abi.parse_attributes(GEMM, _attrs(GEMM)), [_t((None, 6)), _t(None)] + [_t(None)] * 3)
    assert shape == (None, None) and d.d.K == 6 and d.d.gn.C == -1


@pytest.mark.parametrize("op,inputs,match", [
    (GN, _gn_inputs(x=(8,)), "X must have rank 2-5"),
    (GN, _gn_inputs(x=(1, 8, 2, 2, 2, 2)), "X must have rank 2-5"),
    (GN, _gn_inputs(x=(2, 6, 5), p=6), "C=6 is not divisible by num_groups=4"),
    (GN, _gn_inputs(x=(2, 0, 5), p=0), "C \\(the channel count\\) must be positive"),
    (GN, _gn_inputs()[:2], "2 inputs given; expected at least 3"),
    (GN, _gn_inputs(extras=9), "9 extra inputs given; at most 8"),
    (GN, _gn_inputs(pdtype=torch.float16), "per-channel inputs have float16; with X in float32 they must be float32"),
    (GN, [_t((2, 8, 5)), _t((8,)), _t((8,), torch.float16)], "beta has float16 but the other per-channel"),
    (GEMM, _gemm_inputs(w=(8, 5)), "X has K=6 features but W of shape \\(8, 5\\) \\(trans_b=1\\) expects 5"),
    (GEMM, _gemm_inputs(w=(8, 6, 1)), "W must be 2-D"),
    (GEMM, _gemm_inputs(x=(6,)), "X must have rank >= 2"),
    (GEMM, [_t((3, 6)), _t((8, 6), torch.float16)] + [_t((8,))] * 3, "W has float16 but X has float32"),
    (GEMM, _gemm_inputs(p=7), "bias B has 7 elements, expected C=8"),
    (GEMM, [_t((3, 6)), _t((8, 6))] + [_t((2, 4))] * 3, None),  # per-channel tensors of any shape with C elements
    (GEMM, [_t((1 << 30, 1 << 20)), _t((8, 1 << 20))] + [_t((8,))] * 3, "X of shape .* is too large"),
])
def test_describe_rejects_with_the_problem_named(op, inputs, match):
    desc = abi.parse_attributes(op, _attrs(op))
    if match is None:
        abi.describe(desc, inputs)
        return
    with pytest.raises(FusedopsError, match=match):
        abi.describe(desc, inputs)


def test_describe_counts_the_extras_the_chains_reference():
    desc = abi.parse_attributes(GN, _attrs(GN, pre="add(@0)", post="mul(@2)"))
    with pytest.raises(FusedopsError, match=r"chains reference 3 extra input\(s\) \(@0..@2\), got 1"):
        abi.describe(desc, _gn_inputs(extras=1))
    abi.describe(desc, _gn_inputs(extras=3))


@pytest.mark.parametrize("kw,match", [(dict(num_groups=0), "num_groups must be positive"),
                                      (dict(num_groups=1 << 31), "num_groups must be positive"),
                                      (dict(epsilon=float("nan")), "epsilon must be a finite non-negative"),
                                      (dict(pre="frob"), "attribute 'pre': unknown chain step 'frob'"),
                                      (dict(reduce="median"), "attribute 'reduce': unknown reduce 'median'"),
                                      (dict(trans_b=2), "trans_b must be 0 or 1")])
def test_parse_attributes_rejects(kw, match):
    a = abi.Attributes(abi.OP_CODES[GEMM], kw.get("num_groups", 4), kw.get("epsilon", 1e-5),
                       kw.get("pre", "").encode(), b"", kw.get("reduce", "").encode(), kw.get("trans_b", 1), 1)
    err = ctypes.create_string_buffer(512)
    rc = abi.load().fusedops_parse_attributes(ctypes.byref(a), ctypes.byref(abi.OpDesc()), err, len(err))
    assert rc == abi.ERR_INVALID_ARGUMENT and match in err.value.decode()


def test_messages_are_never_cut_inside_a_utf8_character():
    """Messages that carry the caller's text stay decodable at every buffer size: non-ASCII input is named by its
    byte value, and a cut never splits a character."""
    a = abi.Attributes(abi.OP_CODES[GN], 4, 1e-5, "überstep;größe".encode(), b"", b"", 1, 1)
    lib = abi.load()
    full = ctypes.create_string_buffer(1024)
    lib.fusedops_parse_attributes(ctypes.byref(a), ctypes.byref(abi.OpDesc()), full, len(full))
    assert "non-ASCII byte 0xc3" in full.value.decode("ascii")
    for n in range(1, len(full.value) + 2):
        err = ctypes.create_string_buffer(n)
        lib.fusedops_parse_attributes(ctypes.byref(a), ctypes.byref(abi.OpDesc()), err, n)
        text = err.value.decode("utf-8")  # strict: raises on a cut character
        assert full.value.decode().startswith(text)


# ---------------------------------------------------------------------------------------------------------------------
# Plans on the CPU
# ---------------------------------------------------------------------------------------------------------------------

def _gen(seed):
    return torch.Generator().manual_seed(seed)


def test_cpu_plan_runs_the_core_kernels_and_reports_them():
    a = _attrs(GN, pre="gelu", post="mul(@0)")
    d, shape = abi.describe(abi.parse_attributes(GN, a), _gn_inputs(extras=1))
    plan = abi.Plan(d, abi.DEVICE_CPU)
    assert plan.workspace == 0 and plan.kernels.startswith("cpu")
    g = _gen(1)
    x, gamma, beta, e0 = torch.randn(2, 8, 5, generator=g), torch.rand(8, generator=g) + .5, torch.randn(8,
                                                                                                    generator=g), \
        torch.randn(8, generator=g)
    y = torch.full(shape, float("nan"))
    plan.run([x.data_ptr(), gamma.data_ptr(), beta.data_ptr(), e0.data_ptr()], y.data_ptr(), None, 0)
    want = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [e0.double()], a)
    torch.testing.assert_close(y.double(), want, rtol=2e-5, atol=2e-5)
    # The same plan again on other data (plans hold no data): still right.
    x2 = torch.randn(2, 8, 5, generator=g) * 3
    plan.run([x2.data_ptr(), gamma.data_ptr(), beta.data_ptr(), e0.data_ptr()], y.data_ptr(), None, 0)
    want2 = catalog.group_norm_act_reference(x2.double(), gamma.double(), beta.double(), [e0.double()], a)
    torch.testing.assert_close(y.double(), want2, rtol=2e-5, atol=2e-5)


def test_plan_run_checks_pointers_and_counts():
    d, _ = abi.describe(abi.parse_attributes(GN, _attrs(GN, pre="add(@0)")), _gn_inputs(extras=1))
    plan = abi.Plan(d, abi.DEVICE_CPU)
    t = torch.ones(2, 8, 5)
    with pytest.raises(FusedopsError, match=r"3 inputs given; the plan needs 4 to 11"):
        plan.run([t.data_ptr()] * 3, t.data_ptr(), None, 0)
    with pytest.raises(FusedopsError, match="gamma pointer is NULL"):
        plan.run([t.data_ptr(), None, t.data_ptr(), t.data_ptr()], t.data_ptr(), None, 0)
    with pytest.raises(FusedopsError, match="extra input 0 pointer is NULL"):
        plan.run([t.data_ptr()] * 3 + [None], t.data_ptr(), None, 0)


def test_cpu_plans_take_no_prepared_weights():
    """Prepared weights are for 3xTF32 CUDA plans (tests/gpu/test_prepared_weights_gpu.py): a CPU plan reports size
    0, refuses to prepare with the reason, and runs as usual when a buffer is passed anyway (W stays the truth)."""
    d, shape = abi.describe(abi.parse_attributes(GEMM, _attrs(GEMM)), _gemm_inputs())
    plan = abi.Plan(d, abi.DEVICE_CPU)
    assert plan.prepared_weights == 0
    g = _gen(4)
    x, w, b, gamma, beta = (torch.randn(3, 6, generator=g), torch.randn(8, 6, generator=g),
                            *(torch.rand(8, generator=g) + .5 for _ in range(3)))
    junk = torch.full((2 * w.numel(),), float("nan"))
    with pytest.raises(FusedopsError, match="takes no prepared weights"):
        plan.prepare_weights(w.data_ptr(), junk.data_ptr(), junk.numel() * 4)
    y = torch.full(shape, float("nan"))
    ptrs = [t.data_ptr() for t in (x, w, b, gamma, beta)]
    plan.run(ptrs, y.data_ptr(), None, 0, prepared=junk.data_ptr())
    want = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(), beta.double(),
                                                 [], _attrs(GEMM))
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)


def test_plan_needs_a_complete_descriptor():
    d, _ = abi.describe(abi.parse_attributes(GN, _attrs(GN)), _gn_inputs((None, 8, 5)))
    with pytest.raises(FusedopsError, match="descriptor is incomplete"):
        abi.Plan(d, abi.DEVICE_CPU)


def test_cuda_plan_without_cuda_says_so():
    if abi.has_cuda():
        pytest.skip("this build has CUDA: its plans are tested on the GPU (tests/gpu)")
    d, _ = abi.describe(abi.parse_attributes(GN, _attrs(GN)), _gn_inputs())
    with pytest.raises(FusedopsError, match="built without CUDA"):
        abi.Plan(d, 0)
    assert abi.workspace_size(d) == 0


def test_empty_batch_plans_run_nothing():
    d, shape = abi.describe(abi.parse_attributes(GN, _attrs(GN)), _gn_inputs((0, 8, 5)))
    plan = abi.Plan(d, abi.DEVICE_CPU)
    assert shape == (0, 8, 5) and "empty" in plan.kernels
    plan.run([None, None, None], None, None, 0)  # nothing is touched


def test_k_zero_gemm_is_the_bias_alone():
    """X·Wᵀ with K = 0 is zero: Y = GroupNorm(pre(B)) per row, as the reference (F.linear) computes."""
    g = _gen(3)
    a = _attrs(GEMM, post="silu")
    x, w = torch.empty(3, 0), torch.empty(8, 0)
    b, gamma, beta = torch.randn(8, generator=g), torch.rand(8, generator=g) + .5, torch.randn(8, generator=g)
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, [], a)
    want = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(), beta.double(),
                                                 [], a)
    assert y.shape == (3, 8)
    torch.testing.assert_close(y.double(), want, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(y[0], F.silu(F.group_norm(b.reshape(1, 8), 4, gamma, beta)).reshape(8))
