"""The hostile numerics on the CUDA kernels (marker ``gpu``; skipped with the reason without a CUDA device): NaN and
±inf in every channel under every reduction (the CPU kernel dropped a NaN of the first channels under logsumexp),
infinite clamp bounds, one huge group, zero-sized batches. Run on the device with
``python -m pytest tests/gpu/test_hostile_gpu.py -q``."""

from __future__ import annotations

import pytest
import torch

from fusedops import catalog
from kernel_support import DEV, SKIP_REASON, abi

pytestmark = pytest.mark.gpu

if SKIP_REASON:
    pytest.skip(SKIP_REASON, allow_module_level=True)

NAN, INF = float("nan"), float("inf")


def _ref(x, extra, a):
    C = x.shape[1]
    return catalog.group_norm_act_reference(x.double().cpu(), torch.ones(C, dtype=torch.float64),
                                            torch.zeros(C, dtype=torch.float64), [extra.double().cpu()], a)


@pytest.mark.parametrize("channel", [0, 1, 7, 255])
@pytest.mark.parametrize("special", [NAN, INF, -INF])
@pytest.mark.parametrize("reduce", ["logsumexp", "min", "max", "sum", "mean"])
def test_cuda_reduce_with_a_special_channel(reduce, special, channel):
    C = 256
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": 8, "post": "add(@0)", "reduce": reduce})
    x = torch.randn(3, C, 40, generator=torch.Generator().manual_seed(channel)).to(DEV)
    extra = torch.zeros(C)
    extra[channel] = special
    y = abi.groupnorm_act_cuda(x, torch.ones(C, device=DEV), torch.zeros(C, device=DEV), [extra.to(DEV)], a)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double().cpu(), _ref(x, extra, a), rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("reduce", ["logsumexp", "max"])
def test_cuda_gemm_reduce_keeps_a_nan_of_the_first_channels(reduce):
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": 4, "post": "add(@0)", "reduce": reduce,
                                                 "allow_tf32": 0})
    gen = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(16, 32, generator=gen), torch.randn(64, 32, generator=gen), torch.randn(64, generator=gen)
    extra = torch.zeros(64)
    extra[0] = NAN
    y = abi.gemm_groupnorm_act_cuda(x.to(DEV), w.to(DEV), b.to(DEV), torch.ones(64, device=DEV),
                                    torch.zeros(64, device=DEV), [extra.to(DEV)], a, 0)
    torch.cuda.synchronize()
    assert torch.isnan(y).all()


@pytest.mark.parametrize("post,value", [("hardtanh(inf,inf)", 0.0), ("hardtanh(0,inf)", INF), ("relu", NAN),
                                        ("hardtanh(-1,1)", NAN)])
def test_cuda_clamps_with_infinite_bounds_and_nan(post, value):
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": 4, "post": "add(@0);" + post})
    x = torch.randn(2, 8, 5, generator=torch.Generator().manual_seed(1)).to(DEV)
    extra = torch.zeros(8)
    extra[3] = value
    y = abi.groupnorm_act_cuda(x, torch.ones(8, device=DEV), torch.zeros(8, device=DEV), [extra.to(DEV)], a)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double().cpu(), _ref(x, extra, a), rtol=1e-5, atol=1e-5, equal_nan=True)


def test_cuda_one_huge_group():
    S = 1 << 22
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": 1})
    x = (torch.randn(1, 2, S, generator=torch.Generator().manual_seed(5)) + 10).to(DEV)
    y = abi.groupnorm_act_cuda(x, torch.ones(2, device=DEV), torch.zeros(2, device=DEV), [], a)
    xd = x.double().cpu()
    want = (xd - xd.mean()) / torch.sqrt(xd.var(unbiased=False) + 1e-5)
    assert (y.double().cpu() - want).abs().max().item() < 2e-5


@pytest.mark.parametrize("shape", [(0, 8, 3), (2, 8, 0), (0, 8)])
def test_cuda_zero_sized(shape):
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": 4, "reduce": "max"})
    x = torch.zeros(shape, device=DEV)
    y = abi.groupnorm_act_cuda(x, torch.ones(8, device=DEV), torch.zeros(8, device=DEV), [], a)
    assert tuple(y.shape) == catalog.output_shape("GroupNormAct", shape, a)
