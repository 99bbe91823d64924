"""The sm_90 wgmma convolution of ConvTransposeGroupNormAct (plugins/csrc/cuda/sm90/convt_wgmma.cu, issue 13):
the planner picks it on sm_90 for what it takes (float32 X with TF32, stride 1, one convolution group, output channels
a multiple of 64, input channels a multiple of 8, GroupNorm groups of 8/16/32 or a multiple of 64 channels), and it
must match float64 within a small multiple of eager TF32's error, agree with the mma.sync kernel, and refuse a forced
run it cannot do with the reason. Same harness and tolerances as test_convt_gpu.py."""

from __future__ import annotations

import re

import pytest
import torch

from kernel_support import DEV, SKIP_REASON, attrs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]

if SKIP_REASON is None:
    from fusedops.plugins import abi, convt_abi
    from test_convt_gpu import _case, _check

    SM90 = torch.cuda.get_device_capability() == (9, 0)
else:
    SM90 = False
need_sm90 = pytest.mark.skipif(not SM90, reason="the wgmma kernel runs on sm_90 (H100 / H200) only")

# Every case is one the kernel takes; together they cover several pixel tiles and a partial last one, rows of the
# padded grid longer than a tile, 1-D, padding wider than the kernel (input columns left of the grid), dilation,
# 1x1 and 5-tap kernels, two channel tiles, and each GroupNorm group size it handles.
WG_CASES = {
    "model4_small": dict(shape=(2, 64, 19, 37), w_shape=(64, 64, 3, 3), G=8),
    "cout128_groups32_wide": dict(shape=(3, 16, 11, 300), w_shape=(16, 128, 3, 3), G=4, post="relu"),
    "group64_batch1": dict(shape=(1, 8, 5, 9), w_shape=(8, 64, 3, 3), G=1),
    "group128_kernel1x1": dict(shape=(2, 8, 6, 7), w_shape=(8, 128, 1, 1), G=1, pre=""),
    "groups16_dilation2": dict(shape=(2, 24, 13, 17), w_shape=(24, 64, 3, 3), G=4, dilations=[2, 2],
                               pads=[2, 1, 2, 1]),
    "pads_wider_than_kernel": dict(shape=(2, 16, 12, 12), w_shape=(16, 64, 3, 3), G=8, pads=[3, 3, 3, 3]),
    "one_d_5_taps": dict(shape=(3, 32, 700), w_shape=(32, 64, 5), G=8, pads=[2, 2]),
    "extras_no_bias": dict(shape=(2, 16, 9, 10), w_shape=(16, 64, 3, 3), G=8, pre="add(@0);gelu",
                           post="mul(@1);relu", n_extra=2, bias=False),
    # More tiles than an H100 / H200 has SMs: each persistent block runs 2-3 tiles, whose outside-X slots differ
    # (padded rows at the image's top and bottom, edge columns shifting with the tile start), through either
    # epilogue.
    "persistent_many_tiles": dict(shape=(12, 16, 64, 150), w_shape=(16, 64, 3, 3), G=8),
    "persistent_pads_wider": dict(shape=(40, 16, 40, 60), w_shape=(16, 64, 3, 3), G=8, pads=[3, 3, 3, 3]),
    "persistent_shared_epilogue": dict(shape=(12, 16, 64, 150), w_shape=(16, 64, 3, 3), G=4, pre="relu"),
    # Model 4's channels and rows of 16-byte multiples (where the ring producer can stage X), over more tiles than
    # SMs (the ring's slots change hands at each tile).
    "persistent_ring_model4_rows": dict(shape=(6, 64, 40, 128), w_shape=(64, 64, 3, 3), G=8),
    # Two more shapes the ring producer takes: the padding shifts the raw slots by 0 (pads 2), no halo (1x1).
    "ring_pads_2": dict(shape=(2, 64, 10, 24), w_shape=(64, 64, 3, 3), G=8, pads=[2, 2, 2, 2]),
    "ring_kernel_1x1": dict(shape=(3, 64, 8, 16), w_shape=(64, 64, 1, 1), G=4, pre=""),
}
# The cases whose float32 X can go through the ring producer: rows and padded rows of 16-byte multiples, no column
# cropped by padding, one channel tile of 64, a chunk in one producer pass (convt_sm90_layout.cu).
RING_CASES = ["one_d_5_taps", "persistent_ring_model4_rows", "ring_pads_2", "ring_kernel_1x1"]


@need_sm90
@pytest.mark.parametrize("name", sorted(WG_CASES))
def test_wgmma_kernel_against_float64_and_eager(name):
    got, want, eager, plan = _case(**WG_CASES[name])
    assert "convt_wgmma(tf32" in plan.kernels, plan.kernels
    # A `post` multiplying by extras of up to ~3 scales TF32's error with it (the mma.sync kernel's is of the same
    # size: test_wgmma_agrees_with_the_mma_sync_kernel); cuDNN ran these small cases in full FP32.
    _check(got, want, eager, floor=1e-2 if "mul(@1)" in WG_CASES[name].get("post", "") else 5e-3,
           what=f"{name} wgmma")


@need_sm90
@pytest.mark.parametrize("dtype,floor", [(torch.bfloat16, 6e-2), (torch.float16, 8e-3)])
@pytest.mark.parametrize("name", ["model4_small", "cout128_groups32_wide", "one_d_5_taps", "rows_of_256_bf16_vec",
                                  "extras_no_bias", "no_pre_16_channels", "persistent_many_tiles",
                                  "persistent_pads_wider", "persistent_shared_epilogue"])
def test_16bit_wgmma_kernel_against_float64_and_eager(name, dtype, floor):
    """16-bit X: k16 MMAs on [channel octet][slot][8 channels] stages (16-byte loads where rows are 8-aligned, as in
    rows_of_256_bf16_vec; 2-byte loads otherwise); no less accurate than eager in the same type (as
    test_convt_gpu.py's 16-bit test: 1.5 x eager's error or the floor)."""
    case = dict(WG_CASES16.get(name) or WG_CASES[name])
    got, want, eager, plan = _case(**case, dtype=dtype)
    tag = "bf16" if dtype == torch.bfloat16 else "f16"
    assert f"convt_wgmma({tag}" in plan.kernels, plan.kernels
    # (extras_no_bias: a `pre` chain with an operand takes the shared-memory epilogue; its `post` multiplies by
    # extras of up to ~3, which scales the 16-bit error with it)
    _check(got, want, eager, floor=floor * (2 if "mul(@1)" in case.get("post", "") else 1), factor=1.5,
           what=f"{name} {tag} wgmma")


# 16-bit cases besides WG_CASES (16 input channels or more): 8-aligned rows (16-byte loads), no `pre` at all.
WG_CASES16 = {"rows_of_256_bf16_vec": dict(shape=(2, 16, 9, 256), w_shape=(16, 64, 3, 3), G=8, pads=[1, 1, 1, 1]),
              "no_pre_16_channels": dict(shape=(2, 16, 6, 7), w_shape=(16, 64, 1, 1), G=2, pre="")}


@need_sm90
@pytest.mark.parametrize("name", ["model4_small", "cout128_groups32_wide", "one_d_5_taps", "extras_no_bias",
                                  "pads_wider_than_kernel"])
def test_wgmma_agrees_with_the_mma_sync_kernel(name):
    wg, want, _, plan_wg = _case(**WG_CASES[name])
    ig, _, _, plan_ig = _case(**WG_CASES[name], options=abi.PlanOptions(convt_kernel=abi.CONVT_IGEMM))
    assert "convt_wgmma" in plan_wg.kernels and "convt_igemm" in plan_ig.kernels
    # Both TF32; the two differ in X's rounding (truncated here, rounded there), so compare to each's float64 error.
    err_wg = (wg.double() - want).abs().max().item()
    err_ig = (ig.double() - want).abs().max().item()
    gap = (wg.double() - ig.double()).abs().max().item()
    print(f"[convt wgmma] {name}: err {err_wg:.3g}, mma.sync {err_ig:.3g}, gap {gap:.3g}")
    assert gap <= 2 * (err_wg + err_ig) and err_wg <= 2 * err_ig + 1e-3


@need_sm90
@pytest.mark.parametrize("blocks", [1, 3, 1 << 30])
@pytest.mark.parametrize("name", ["model4_small", "pads_wider_than_kernel", "one_d_5_taps", "extras_no_bias",
                                  "persistent_ring_model4_rows"])
@pytest.mark.parametrize("allow_tf32", [True, False], ids=["tf32", "3xtf32"])
def test_persistent_grid_of_any_size_gives_the_same_bits(name, blocks, allow_tf32):
    """convt_blocks caps the persistent grid: 1 block runs every tile in turn (its stages reused across tiles whose
    outside-X slots differ), 3 interleave, 2^30 runs one tile a block. Same bits as the planner's grid, for TF32's
    tiles of 512 pixels and 3xTF32's of 256."""
    case = dict(WG_CASES[name], allow_tf32=allow_tf32)
    ref, want, eager, plan = _case(**case)
    got, _, _, plan_b = _case(**case, options=abi.PlanOptions(convt_blocks=blocks))
    grid = int(re.search(r"blocks=(\d+)\)", plan_b.kernels).group(1))
    assert "convt_wgmma" in plan_b.kernels and 1 <= grid <= blocks, plan_b.kernels  # (at most the tile count)
    assert torch.equal(got, ref), (name, blocks, (got.double() - ref.double()).abs().max().item())


@need_sm90
@pytest.mark.parametrize("name", RING_CASES)
def test_ring_producer_gives_the_register_producers_bits(name):
    """The ring producer (plan option convt_ring_producer: cp.async of raw chunks laid out on the stage's slots, then
    rounding and transposition from shared memory; W through its own ring) stages the same TF32 values in the same
    places as the register producer: same bits, also with a grid of 1 and 3 blocks (W's ring runs across tiles)."""
    ref, _, _, plan = _case(**WG_CASES[name])
    got, _, _, plan_r = _case(**WG_CASES[name], options=abi.PlanOptions(convt_ring_producer=True))
    assert "ring=0" in plan.kernels, plan.kernels  # the planner's default
    assert int(re.search(r"ring=(\d+)", plan_r.kernels).group(1)) >= 2, plan_r.kernels
    assert torch.equal(got, ref), (name, (got.double() - ref.double()).abs().max().item())
    for blocks in (1, 3):
        got_b, _, _, _ = _case(**WG_CASES[name], options=abi.PlanOptions(convt_ring_producer=True, convt_blocks=blocks))
        assert torch.equal(got_b, ref), (name, blocks, (got_b.double() - ref.double()).abs().max().item())


@need_sm90
def test_a_plan_runs_after_a_plan_with_less_shared_memory():
    """The ring plan needs more shared memory than the register one of the same shape; making the second must not
    lower the kernels' cap under the first (it did once: 'kernel launch failed: invalid argument')."""
    x = torch.randn(1, 64, 8, 256, device=DEV)  # model 4's rows: ring 3 x 40 KB + 2 stages > 4 stages
    w = torch.randn(64, 64, 3, 3, device=DEV) / 24
    b, gamma, beta = (torch.randn(64, device=DEV) for _ in range(3))
    a = attrs(num_groups=8, pre="gelu")
    ring = convt_abi.make_plan(x, w, a, torch.float32, abi.PlanOptions(convt_ring_producer=True))
    regs = convt_abi.make_plan(x, w, a, torch.float32)
    smem = [int(re.search(r"smem=(\d+)", p.kernels).group(1)) for p in (ring, regs)]
    assert smem[0] > smem[1], (ring.kernels, regs.kernels)
    got = convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [], a, plan=ring)
    ref = convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [], a, plan=regs)
    assert torch.equal(got, ref)


@need_sm90
@pytest.mark.parametrize("name", ["model4_small", "cout128_groups32_wide", "one_d_5_taps", "pads_wider_than_kernel",
                                  "extras_no_bias", "persistent_many_tiles"])
def test_3xtf32_on_wgmma_is_the_planners_choice(name):
    """Strict float32 on the wgmma kernel (X and W as TF32 hi + lo, three MMAs a tap), the planner's choice on sm_90
    since it ran 2.1 x faster than the mma.sync kernel's 3xTF32 at model 4's batch 128 (H200, 2026-11-27); as
    accurate as that one (test_convt_gpu.py's bound: 20 x eager FP32's error or 6e-5) and agreeing with it."""
    case = dict(WG_CASES[name], allow_tf32=False)
    got, want, eager, plan = _case(**case)
    assert "convt_wgmma(3xtf32" in plan.kernels, plan.kernels
    _check(got, want, eager, floor=6e-5, factor=20.0, what=f"{name} wgmma 3xtf32")
    if WG_CASES[name]["shape"][1] >= 32:  # K of 160+: the tensor cores' accumulation shows (convt_wgmma.h)
        # At these sizes the float32 GELU (gelu_fast, within 3e-6 of float64) sets the error, eager's and ours
        # alike (2.1-2.6e-6, H200); accumulating every product in place gave 2.3e-5 on model4_small.
        _check(got, want, eager, floor=4e-6, factor=1.0, what=f"{name} wgmma 3xtf32 against eager FP32")
    ig, _, _, plan_ig = _case(**case, options=abi.PlanOptions(convt_kernel=abi.CONVT_IGEMM))
    assert "convt_igemm(3xtf32" in plan_ig.kernels, plan_ig.kernels
    err_wg, err_ig = ((t.double() - want).abs().max().item() for t in (got, ig))
    assert (got.double() - ig.double()).abs().max().item() <= 2 * (err_wg + err_ig) + 1e-6, (err_wg, err_ig)


@need_sm90
def test_3xtf32_at_model4_rows_is_as_accurate_as_eager_fp32():
    """Model 4's rows (64 input channels, 3x3: 216 products an output in each of hi / lo): fresh accumulators per
    kernel row keep the tensor cores' round-toward-zero accumulation from growing the error past eager FP32's."""
    got, want, eager, plan = _case((2, 64, 64, 256), (64, 64, 3, 3), 8, allow_tf32=False)
    assert "convt_wgmma(3xtf32,64x256" in plan.kernels, plan.kernels
    _check(got, want, eager, floor=0.0, factor=1.0, what="model 4 rows, batch 2, 3xtf32 against eager FP32")


@need_sm90
def test_model4_full_width_batch_2_runs_the_wgmma_kernel():
    got, want, eager, plan = _case((2, 64, 64, 256), (64, 64, 3, 3), 8)
    assert "convt_wgmma(tf32" in plan.kernels, plan.kernels
    _check(got, want, eager, floor=5e-3, what="model 4 rows, batch 2, 64x256")


@need_sm90
def test_nan_stays_in_its_sample_and_groups():
    got, want, eager, plan = _case(**WG_CASES["model4_small"], nan_at=(1, 3, 4, 5))
    assert "convt_wgmma" in plan.kernels
    assert torch.isnan(got[1]).any() and not torch.isnan(got[0]).any()
    _check(got, want, eager, floor=5e-3, what="nan")


@pytest.mark.parametrize("what,case,match", [
    ("stride 2", dict(shape=(1, 8, 5, 5), w_shape=(8, 64, 3, 3), G=8, strides=[2, 2]), "strides of 1 only"),
    ("48 output channels", dict(shape=(1, 8, 5, 5), w_shape=(8, 48, 3, 3), G=8), "multiple of 64"),
    ("groups of 4 channels", dict(shape=(1, 8, 5, 5), w_shape=(8, 64, 3, 3), G=16), "groups of 8, 16, 32"),
    ("16-bit, 8 input channels", dict(shape=(1, 8, 5, 5), w_shape=(8, 64, 3, 3), G=8, dtype=torch.bfloat16),
     "multiple of 16"),
])
def test_forcing_the_wgmma_kernel_where_it_cannot_run_names_the_reason(what, case, match):
    if not SM90:
        match = "not sm_90|without sm_90a"
    with pytest.raises(Exception, match=match):
        _case(**case, options=abi.PlanOptions(convt_kernel=abi.CONVT_WGMMA))


@need_sm90
@pytest.mark.parametrize("ring", [False, True])
def test_x_not_16_byte_aligned_gives_the_aligned_result(ring):
    """16-byte loads need X rows aligned; an X starting 4 bytes past a boundary takes the 4-byte loads, which must
    stage the same values (same bits out). With the ring producer's plan (pads 2: a shape it takes) the misaligned
    call runs the register producer in the plan's two stages."""
    shape, w_shape = (2, 64 if ring else 16, 7, 256), (64 if ring else 16, 64, 3, 3)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(*shape, generator=g).to(DEV)
    shifted = torch.empty(x.numel() + 1, device=DEV)[1:].view(shape)
    shifted.copy_(x)
    assert shifted.data_ptr() % 16 != 0 and shifted.is_contiguous()
    w = (torch.randn(*w_shape, generator=g) * 0.1).to(DEV)
    b, gamma, beta = (torch.randn(64, generator=g).to(DEV) for _ in range(3))
    a = attrs(num_groups=8, pre="gelu")
    conv = dict(strides=[1, 1], pads=[2] * 4 if ring else [1] * 4, output_padding=[0, 0], dilations=[1, 1], group=1)
    plan = convt_abi.make_plan(x, w, a, torch.float32, abi.PlanOptions(convt_ring_producer=ring), **conv)
    assert "convt_wgmma" in plan.kernels and ("ring=3" in plan.kernels) == ring, plan.kernels
    aligned = convt_abi.convtranspose_groupnorm_act(x, w, b, gamma, beta, [], a, plan=plan, **conv)
    got = convt_abi.convtranspose_groupnorm_act(shifted, w, b, gamma, beta, [], a, plan=plan, **conv)
    torch.cuda.synchronize()
    assert torch.isfinite(aligned).all() and torch.equal(got, aligned)


@need_sm90
def test_model4_modelnew_runs_the_one_op_path_with_tf32():
    """ModelNew of model 4 takes the one-op path (ConvTranspose + GELU + GroupNorm in one plan, the wgmma kernel)
    on sm_90 with TF32 convolutions, with strict FP32 (3xTF32: no less accurate than eager FP32 against float64) and
    in bfloat16; all match float64."""
    import copy

    from fusedops.models import convtranspose2d_gelu_groupnorm as model4
    from fusedops.models import get_entry

    WGMMA_RUNS_CACHE = model4._WGMMA_RUNS

    entry = get_entry("4")
    ref = entry.build("bench", seed=0).cuda()  # 64 -> 64 channels, 8 groups: what the wgmma kernel takes
    new = entry.build("bench", cls_name="ModelNew", seed=0).cuda()
    x = torch.rand(2, 64, 30, 41, generator=torch.Generator().manual_seed(11)).cuda()
    with torch.no_grad():
        want = copy.deepcopy(ref).double()(x.double())
    prev = torch.backends.cudnn.allow_tf32
    try:
        for tf32 in (True, False):
            torch.backends.cudnn.allow_tf32 = tf32
            WGMMA_RUNS_CACHE.clear()
            with torch.no_grad():
                got = new(x)
                eager = ref(x)
            torch.cuda.synchronize()
            assert list(WGMMA_RUNS_CACHE.values()) == [True], WGMMA_RUNS_CACHE
            err = (got.double() - want).abs().max().item()
            err_eager = (eager.double() - want).abs().max().item()
            print(f"[convt modelnew] tf32={tf32}: max |err| {err:.3g}, eager {err_eager:.3g}")
            # strict: eager FP32's error or the float32 GELU's (test_3xtf32_on_wgmma_is_the_planners_choice)
            assert err <= (1e-2 if tf32 else max(err_eager, 4e-6)), f"tf32={tf32}: {err:.3g}, eager {err_eager:.3g}"
    finally:
        torch.backends.cudnn.allow_tf32 = prev
    # bfloat16: the one-op path too, within bfloat16's bound (test_models_gpu.py's TOL_16: 5e-2)
    WGMMA_RUNS_CACHE.clear()
    with torch.no_grad():
        got = copy.deepcopy(new).to(torch.bfloat16)(x.to(torch.bfloat16))
    torch.cuda.synchronize()
    assert list(WGMMA_RUNS_CACHE.values()) == [True], WGMMA_RUNS_CACHE
    err = (got.double() - want).abs().max().item()
    assert got.dtype == torch.bfloat16 and err <= 5e-2, f"bfloat16: max error {err:.3g}"


@need_sm90
def test_model4_modelnew_takes_a_channels_last_input():
    """A PyTorch user's channels_last X (model and input converted): ModelNew still runs the one op (X is made
    contiguous on the way in) and matches float64."""
    import copy

    from fusedops.models import get_entry

    entry = get_entry("4")
    ref = entry.build("bench", seed=0).cuda()
    new = entry.build("bench", cls_name="ModelNew", seed=0).cuda().to(memory_format=torch.channels_last)
    x = torch.rand(2, 64, 19, 23, generator=torch.Generator().manual_seed(12)).cuda()
    with torch.no_grad():
        want = copy.deepcopy(ref).double()(x.double())
        got = new(x.to(memory_format=torch.channels_last))
    err = (got.double() - want).abs().max().item()
    assert err <= 1e-2, f"channels_last: max error {err:.3g}"


@need_sm90
@pytest.mark.parametrize("normalisers,blocks", [(1, 0), (3, 0), (2, 1)])
@pytest.mark.parametrize("name,dtype,allow_tf32", [
    ("model4_small", torch.float32, True), ("model4_small", torch.bfloat16, True),
    ("persistent_many_tiles", torch.float16, True), ("persistent_shared_epilogue", torch.float32, True),
    ("cout128_groups32_wide", torch.float32, True), ("extras_no_bias", torch.float32, True),
    ("group64_batch1", torch.float32, True), ("persistent_pads_wider", torch.float32, False)])
def test_normaliser_kernel_behind_the_convolution(name, dtype, allow_tf32, normalisers, blocks):
    """Plan option convt_normalisers = k: k blocks of a second kernel, started while the convolution runs, wait for
    each sample's partials (counted as the convolution writes them), combine them and normalise its planes in place.
    Same convolution bits, statistics combined in another order: equal to the separate finishing + normalise kernels
    within float32 rounding, and to float64 as before; also with the convolution on one block (blocks=1), where the
    normaliser waits for every sample."""
    case = dict(WG_CASES[name], dtype=dtype, allow_tf32=allow_tf32)
    ref, want, eager, plan = _case(**case, options=abi.PlanOptions(convt_blocks=blocks))
    got, _, _, plan_n = _case(**case, options=abi.PlanOptions(convt_normalisers=normalisers, convt_blocks=blocks))
    assert f"convt_normaliser(blocks={normalisers},behind)" in plan_n.kernels, plan_n.kernels
    assert "gn_normalize_inplace" in plan.kernels and "gn_normalize_inplace" not in plan_n.kernels
    assert torch.equal(torch.isnan(got), torch.isnan(ref))
    scale = 1 + ref.float().abs().max().item()
    tol = 2e-5 if dtype == torch.float32 else (1e-2 if dtype == torch.bfloat16 else 2e-3)
    gap = (got.double() - ref.double()).abs().max().item()
    assert gap <= tol * scale, (name, dtype, normalisers, gap)
    floor = {torch.float32: 5e-3, torch.bfloat16: 6e-2, torch.float16: 8e-3}[dtype]
    _check(got, want, eager, floor=floor * (2 if "mul(@1)" in case.get("post", "") else 1), factor=3.0,
           what=f"{name} normaliser")
