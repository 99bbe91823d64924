"""The CPU GemmGroupNormAct's row epilogue (plugins/csrc/core/cpu_gemm.cpp) against the float64 reference on fresh
random inputs: every group size the statistics unroll (4, 8, 16, 32, 64), a run-time size and one longer than a
block (merged moments); chains that run over a block of rows at once and ones that read per-channel operands (row
by row); with and without a bias (the GEMM accumulates onto the bias written into the tile, else overwrites it);
float32 Y that is the GEMM's own output (in place) and 16-bit Y / channel reductions through the scratch; a Y that
aliases X (a caller running in place); NaN / inf rows in the tiled path. Both GEMM backends.
"""

from __future__ import annotations

import math

import pytest
import torch

from fusedops import catalog
from fusedops.plugins import cpu_blas
from native_support import built_abi

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}  # as tests/test_cpu_blas.py


@pytest.fixture(scope="module")
def abi():
    abi_mod = built_abi("the native libraries")
    yield abi_mod
    abi_mod.set_cpu_blas(cpu_blas.default_choice())  # leave the process as loading the library leaves it


@pytest.fixture(params=["blas", "eigen"])
def backend(abi, request):
    choice = "eigen" if request.param == "eigen" else cpu_blas.scipy_openblas_library()
    if choice is None:
        pytest.skip("scipy-openblas32 is not installed (extra cpu-blas; scripts/dev.sh installs it)")
    abi.set_cpu_blas(choice)
    return request.param


def _inputs(M, K, C, G, pre="", post="silu", reduce="", trans_b=1, bias=True, dtype=torch.float32, seed=None):
    seed = seed if seed is not None else torch.seed() % 2**31  # fresh unless given
    print(f"inputs: seed {seed}")  # shown with a failure, to reproduce it
    gen = torch.Generator().manual_seed(seed)
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": G, "pre": pre, "post": post, "reduce": reduce,
                                                 "trans_b": trans_b})
    x = (torch.rand(M, K, generator=gen, dtype=torch.float64) * 2 - 0.5).to(dtype)
    w = (torch.randn(*((C, K) if trans_b else (K, C)), generator=gen, dtype=torch.float64) / math.sqrt(K)).to(dtype)
    b = (torch.randn(C, generator=gen, dtype=torch.float64) * 3).to(dtype) if bias else None
    gamma = (torch.randn(C, generator=gen, dtype=torch.float64) + 1).to(dtype)
    beta = torch.randn(C, generator=gen, dtype=torch.float64).to(dtype)
    extras = [(torch.rand(C, generator=gen, dtype=torch.float64) + 0.5).to(dtype) for _ in range(a.num_extras)]
    ref = catalog.gemm_group_norm_act_reference(x.double(), w.double(),
                                                b.double() if bias else torch.zeros(C, dtype=torch.float64),
                                                gamma.double(), beta.double(), [e.double() for e in extras], a)
    return a, (x, w, b, gamma, beta, extras), ref.to(dtype).double()


# (M, K, C, groups): M·C·K >= 2^18, so the GEMM runs in row tiles with the epilogue in each task (C < M), or in
# column tiles with the epilogue afterwards (C >= M); channels per group 4 ... 64 unrolled, 24 at run time, 1100
# merged from blocks; the last is one task (M·C·K < 2^18).
SHAPES = [(1100, 40, 128, 32), (700, 64, 256, 32), (1030, 96, 512, 32), (600, 72, 384, 12), (515, 33, 640, 10),
          (300, 20, 768, 32), (40, 16, 2200, 2), (10, 8, 64, 8)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"M{s[0]}K{s[1]}C{s[2]}cpg{s[2] // s[3]}")
@pytest.mark.parametrize("chains", [("", "silu"), ("add(@0);relu", "mul(@1)"), ("", "gelu;sub(@0)")],
                         ids=["block", "per-channel", "mixed"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_group_sizes_and_chains_match_float64(abi, backend, shape, chains, bias):
    M, K, C, G = shape
    a, (x, w, b, gamma, beta, extras), ref = _inputs(M, K, C, G, *chains, bias=bias)
    out = torch.full(ref.shape, float("nan"))  # Y is the GEMM's output: nothing of it may be read before written
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, extras, a, out=out)
    assert not y.isnan().any()
    err = (y.double() - ref).abs()
    assert (err <= TOL[torch.float32] + _float32_gemm_slack(a, x, w, b, gamma, extras, G)).all(), err.max().item()


def _float32_gemm_slack(a, x, w, b, gamma, extras, G) -> torch.Tensor:
    """What the float32 GEMM's own rounding may move an output by: its typical error sqrt(K) u (|x| |w|^T + |b| +
    |extras|), times |gamma| and the post chain's scale (extras <= 1.5), over the group's sqrt(var + eps). Groups of 4
    channels can draw a spread near 0 where the GEMM output itself is a cancellation (seed 1773408489, blas: 1.5e-4
    at a group [4e-4, 0, 0, 0] after ReLU; torch's float32 GEMM 2.5e-5 there by its summation order), so a fixed
    tolerance fails on luck; the slack is ~1e-6 on ordinary groups."""
    xd, wd = x.double(), w.double()
    K, C = xd.shape[1], wd.shape[0]
    bd = b.double() if b is not None else torch.zeros(C, dtype=torch.float64)
    magnitude = xd.abs() @ wd.abs().T + bd.abs() + sum(e.double().abs() for e in extras)
    pre = catalog.apply_chain(xd @ wd.T + bd, a.pre, [e.double() for e in extras])
    var = pre.reshape(pre.shape[0], G, -1).var(dim=2, unbiased=False).repeat_interleave(C // G, dim=1)
    return 4 * math.sqrt(K) * 2.0**-24 * magnitude * gamma.double().abs() * 1.5 / (var + a.epsilon).sqrt()


@pytest.mark.parametrize("dtype,reduce", [(torch.bfloat16, ""), (torch.float16, ""), (torch.float32, "mean"),
                                          (torch.float16, "logsumexp")])
@pytest.mark.parametrize("trans_b", [1, 0])
def test_scratch_paths_match_float64(abi, backend, dtype, reduce, trans_b):
    """16-bit Y and channel reductions go through the float32 scratch Z, not Y."""
    a, (x, w, b, gamma, beta, extras), ref = _inputs(1024, 48, 256, 16, "", "silu", reduce, trans_b, dtype=dtype)
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, extras, a)
    torch.testing.assert_close(y.double(), ref, rtol=TOL[dtype], atol=TOL[dtype])


def test_y_aliasing_x_gives_the_same_result(abi, backend):
    """A caller running in place (Y is X's memory, K == C): the tiles must not overwrite X rows other tiles read."""
    a, (x, w, b, gamma, beta, extras), ref = _inputs(2048, 256, 256, 32, seed=7)
    fresh = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, extras, a)
    x_buf = x.clone()
    y = abi.gemm_groupnorm_act_cpu(x_buf, w, b, gamma, beta, extras, a, out=x_buf)
    assert y.data_ptr() == x_buf.data_ptr()
    assert torch.equal(y, fresh)
    torch.testing.assert_close(y.double(), ref, rtol=TOL[torch.float32], atol=TOL[torch.float32])


def test_nan_and_inf_rows_in_the_tiled_path(abi, backend):
    """A NaN in X poisons its row only; an inf bias channel makes its group NaN (inf - inf), as in the reference."""
    a, (x, w, b, gamma, beta, extras), _ = _inputs(1500, 64, 256, 32, seed=3)
    x[17, 5] = float("nan")
    x[900, 0] = float("inf")
    b[40] = float("inf")  # group 5 (channels 40 ... 47) of every row
    ref = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(), beta.double(),
                                                [], a)
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, extras, a)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    finite = ~torch.isnan(ref)
    torch.testing.assert_close(y.double()[finite], ref[finite], rtol=TOL[torch.float32], atol=TOL[torch.float32])
