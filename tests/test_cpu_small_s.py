"""The CPU GroupNormAct's small-spatial-size path (plugins/csrc/core/cpu_small_s.cpp: S < 32, whole groups of a
sample per task, per-element parameters) against the float64 catalog reference: S = 1 / 3 / 31 around the
threshold and S = 32 / 64 on the general path, per-channel extras in both chains, every channel reduction, float16 /
bfloat16 storage, one sample with many groups (tasks split a sample) and many short samples (tasks take several).
NaN-poisoned outputs catch elements a task never writes."""

from __future__ import annotations

import zlib

import pytest
import torch

from fusedops import catalog
from native_support import built_abi


@pytest.fixture(scope="module")
def abi():
    return built_abi()


CHAINS = [("", ""), ("mul(@0);silu", "add(@1);gelu"), ("", "hardtanh(-1,1);rsub(@0)")]
SHAPES = [(7, 24, ()), (3, 64, (3,)), (2, 16, (31,)), (5, 32, (4, 8)), (2, 16, (64,)), (1, 4096, ()), (300, 8, ())]


@pytest.mark.parametrize("reduce", ["", "min", "max", "sum", "mean", "logsumexp"])
@pytest.mark.parametrize("chains", CHAINS)
@pytest.mark.parametrize("shape", SHAPES)
def test_small_spatial_sizes_match_the_float64_reference(abi, shape, chains, reduce):
    n, c, spatial = shape
    groups = 8 if c % 8 == 0 else 4
    gen = torch.Generator().manual_seed(zlib.crc32(repr((shape, chains, reduce)).encode()))
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": groups, "pre": chains[0], "post": chains[1],
                                             "reduce": reduce})
    x = torch.randn(n, c, *spatial, generator=gen) * 3 + 1
    gamma, beta = torch.rand(c, generator=gen) + 0.5, torch.randn(c, generator=gen)
    extras = [torch.randn(c, generator=gen) for _ in range(a.num_extras)]
    ref = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [e.double() for e in extras], a)
    out = torch.full(ref.shape, float("nan"))
    y = abi.groupnorm_act_cpu(x, gamma, beta, extras, a, out=out)
    torch.testing.assert_close(y.double(), ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_small_spatial_sizes_in_16bit_storage(abi, dtype):
    gen = torch.Generator().manual_seed(3)
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": 8, "post": "silu"})
    x = (torch.randn(33, 64, 2, generator=gen) * 2).to(dtype)
    gamma, beta = torch.rand(64, generator=gen) + 0.5, torch.randn(64, generator=gen)
    ref = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [], a)
    y = abi.groupnorm_act_cpu(x, gamma.to(dtype), beta.to(dtype), [], a)
    spacing = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
    ref_q = catalog.group_norm_act_reference(x.double(), gamma.to(dtype).double(), beta.to(dtype).double(), [], a)
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), ref_q, rtol=spacing, atol=spacing * 4)
    assert (y.double() - ref).abs().max() < 0.05
