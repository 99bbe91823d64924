"""The general CPU GroupNormAct path's statistics (plugins/csrc/core/cpu_kernels.cpp, merge_blocks): a group's
moment blocks are summed four at a time and merged in order. Groups of 1-9 blocks (runs of four plus a tail), blocks
of S values (S <= 1024), of 1024 (S a multiple of 1024) and ragged channels (S = 1500), float32 X read directly and
16-bit X / a pre chain through the scratch, with a large mean that float32 statistics would get wrong (1e-4 here),
all against the float64 catalog reference. NaN-poisoned outputs catch elements never written. Groups of fewer than
four blocks are batched several to a task (a last, shorter batch too), and with a float32 Y the post chain then runs
once over the batch: the same bits as channel by channel (a misaligned Y takes that path)."""

from __future__ import annotations

import zlib

import pytest
import torch

from fusedops import catalog
from native_support import built_abi


@pytest.fixture(scope="module")
def abi():
    return built_abi()


# (N, C, S, groups): blocks per group = C / groups channels x ceil(S / 1024) blocks each.
CASES = [
    (2, 8, 32, 8),       # 1 block
    (2, 12, 100, 4),     # 3 blocks: tail only
    (3, 16, 64, 4),      # 4 blocks: one run of four
    (2, 20, 1024, 4),    # 5 blocks of 1024
    (1, 28, 40, 4),      # 7 blocks, n not a multiple of 4
    (2, 36, 33, 4),      # 9 blocks of 33 values: two runs, a tail, ragged vectors
    (1, 4, 2048, 2),     # 2 channels x 2 blocks of 1024
    (2, 8, 1500, 2),     # ragged channels: 1024 + 476 per channel
    (4, 64, 64, 32),     # 2 blocks a group: batches of 8 groups (post chain over the batch)
    (3, 10, 64, 5),      # 2 blocks a group, 15 groups: a last batch of 7
    (5, 6, 48, 3),       # 2 blocks of 48 a group, one batch of 15 groups
    (2, 32, 40, 16),     # S not a multiple of 16: batched moments, post chain channel by channel
]


@pytest.mark.parametrize("dtype,pre", [(torch.float32, ""), (torch.float32, "mul(0.5)"), (torch.float16, "")],
                         ids=["f32-direct", "f32-scratch", "f16-scratch"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"N{c[0]}C{c[1]}S{c[2]}G{c[3]}")
def test_group_statistics_match_float64(abi, case, dtype, pre):
    n, c, s, groups = case
    gen = torch.Generator().manual_seed(zlib.crc32(repr((case, pre)).encode()))
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": groups, "pre": pre, "post": "silu"})
    shift = 8.0 if dtype == torch.float16 else 100.0  # a large mean: statistics must be exact two-pass in double
    x = (torch.randn(n, c, s, generator=gen, dtype=torch.float64) * 3 + shift).to(dtype)
    gamma, beta = torch.rand(c, generator=gen) + 0.5, torch.randn(c, generator=gen)
    ref = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [], a)
    out = torch.full(ref.shape, float("nan"), dtype=dtype)
    y = abi.groupnorm_act_cpu(x, gamma.to(dtype), beta.to(dtype), [], a, out=out)
    if dtype == torch.float32:
        torch.testing.assert_close(y.double(), ref, rtol=2e-5, atol=2e-5)
    else:  # the reference on the same rounded parameters, within float16's spacing
        ref = catalog.group_norm_act_reference(x.double(), gamma.to(dtype).double(), beta.to(dtype).double(), [], a)
        torch.testing.assert_close(y.double(), ref, rtol=2.0 ** -10, atol=2.0 ** -8)


@pytest.mark.parametrize("post", ["silu", "gelu;mul(2);tanh", "relu;add(0.5)"])
@pytest.mark.parametrize("case", [(4, 64, 64, 32), (3, 10, 64, 5), (2, 12, 32, 6)], ids=lambda c: f"N{c[0]}C{c[1]}S{c[2]}G{c[3]}")
def test_batched_post_chain_matches_channel_by_channel(abi, case, post):
    """A 64-byte-aligned float32 Y of small groups runs the post chain once per batch of groups; one element off
    alignment it runs per channel. Both must give the same bits (values in [-4, 4], where Eigen's scalar and vector
    paths agree), and match float64."""
    n, c, s, groups = case
    gen = torch.Generator().manual_seed(zlib.crc32(repr((case, post)).encode()))
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": groups, "post": post})
    x = torch.randn(n, c, s, generator=gen) * 2 + 3
    gamma, beta = torch.rand(c, generator=gen) + 0.5, torch.randn(c, generator=gen) * 0.5
    outs = []
    for off in (0, 1):  # torch's allocations are 64-byte aligned: off 0 aligned, off 1 not
        buf = torch.full((x.numel() + 16,), float("nan"))
        assert buf.data_ptr() % 64 == 0
        out = buf[off:off + x.numel()].view(n, c, s)
        outs.append(abi.groupnorm_act_cpu(x, gamma, beta, [], a, out=out).clone())
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))
    ref = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [], a)
    torch.testing.assert_close(outs[0].double(), ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("groups", [163840, 327680], ids=["glen16", "glen8"])
def test_tiny_groups_on_the_general_path(abi, groups):
    """S < 32 with too many elements for the small-S path's expanded parameters: the general path with groups of
    8-16 values, batched up to the most groups a task takes (64)."""
    n, c, s = 1, 327680, 8
    gen = torch.Generator().manual_seed(groups)
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": groups, "post": "silu"})
    x = torch.randn(n, c, s, generator=gen) * 3 + 100
    gamma, beta = torch.rand(c, generator=gen) + 0.5, torch.randn(c, generator=gen)
    ref = catalog.group_norm_act_reference(x.double(), gamma.double(), beta.double(), [], a)
    y = abi.groupnorm_act_cpu(x, gamma, beta, [], a, out=torch.full(ref.shape, float("nan")))
    torch.testing.assert_close(y.double(), ref, rtol=2e-5, atol=2e-5)
