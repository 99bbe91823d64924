"""The planner's GEMM choice for GemmGroupNormAct (cuBLASLt + GroupNorm kernel, or the CUTLASS sm_90 kernel with
GroupNorm in its epilogue), through the C ABI's pure rule fusedops_gemm_kernel_choice: no GPU needed. The GPU tests
(tests/gpu/test_cutlass_gemm_gpu.py) check that plans follow it and what each kernel computes."""

from __future__ import annotations

import pytest
import torch

from fusedops import catalog
from fusedops.errors import FusedopsError
from fusedops.plugins import abi

GEMM = catalog.GEMM_GROUP_NORM_ACT.name


@pytest.fixture(scope="module", autouse=True)
def library():
    try:
        abi.load()
    except FusedopsError as e:
        pytest.skip(f"libfusedops is not built here: {e}")


H200 = abi.GemmDevice(9, 0, 132, 1)


def desc(M=1024, K=8192, C=8192, groups=512, dtype=torch.float32, allow_tf32=1, trans_b=1, reduce="", pre="",
         post=""):
    a = catalog.parse_attrs(GEMM, {"num_groups": groups, "allow_tf32": allow_tf32, "trans_b": trans_b,
                                   "reduce": reduce, "pre": pre, "post": post})
    w = (C, K) if trans_b else (K, C)
    ins = [abi.tensor_desc(dtype, (M, K)), abi.tensor_desc(dtype, w)] + [abi.tensor_desc(torch.float32, (C,))] * 3
    n_extra = 1 if "@0" in pre + post else 0
    ins += [abi.tensor_desc(torch.float32, (C,))] * n_extra
    d, _ = abi.describe(abi.parse_attributes(GEMM, a), ins)
    return d


def choice(d, dev=H200, **options):
    return abi.gemm_kernel_choice(d, dev, abi.PlanOptions(**options) if options else None)


def cutlass_applies(kernel, why):
    """The CUTLASS kernel runs, or would and is held back (TF32 / 16-bit automatic plans: gemm_choice.cpp's
    kCutlassAutomatic, measured slower than cuBLASLt + the GroupNorm epilogue there)."""
    held_back = kernel == abi.GEMM_CUBLASLT and "would apply, but" in why and "held back" in why
    return kernel == abi.GEMM_CUTLASS or held_back


MODELS = {  # the reference models at their bench size: (groups, pre, post, reduce)
    "model 1": (512, "", "leaky_relu(0.01);mul(2)", ""),
    "model 2": (512, "", "", "min"),
    "model 3": (256, "add(@0);hardtanh(-1,1);mish", "", ""),
}


@pytest.mark.parametrize("dtype,mode", [(torch.float32, "tf32"), (torch.bfloat16, "bf16"), (torch.float16, "fp16")])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_reference_models_fit_the_cutlass_kernel_on_hopper(model, dtype, mode):
    """The kernel applies; automatic plans at these precisions keep cuBLASLt + the epilogue (held back, and the reason
    says so) and a forced plan runs it."""
    groups, pre, post, reduce = MODELS[model]
    d = desc(groups=groups, dtype=dtype, pre=pre, post=post, reduce=reduce)
    kernel, why = choice(d)
    assert kernel == abi.GEMM_CUBLASLT and cutlass_applies(kernel, why), why
    assert f"CUTLASS {mode} " in why and f"groups of {8192 // groups} channels" in why
    kernel, why = choice(d, gemm_kernel=abi.GEMM_CUTLASS)
    assert kernel == abi.GEMM_CUTLASS and f"CUTLASS {mode} " in why and "forced" in why


@pytest.mark.parametrize("cc", [(8, 0), (8, 6), (8, 9), (10, 0), (12, 0)])
def test_other_architectures_keep_cublaslt_and_refuse_a_forced_cutlass(cc):
    dev = abi.GemmDevice(cc[0], cc[1], 132, 1)
    kernel, why = choice(desc(), dev)
    assert kernel == abi.GEMM_CUBLASLT and f"sm_{cc[0]}{cc[1]}" in why
    with pytest.raises(FusedopsError, match=f"is forced: .*this device is sm_{cc[0]}{cc[1]}"):
        choice(desc(), dev, gemm_kernel=abi.GEMM_CUTLASS)


def test_a_library_without_cutlass_keeps_cublaslt():
    dev = abi.GemmDevice(9, 0, 132, 0)
    kernel, why = choice(desc(), dev)
    assert kernel == abi.GEMM_CUBLASLT and "without the CUTLASS kernels" in why
    with pytest.raises(FusedopsError, match="without the CUTLASS kernels"):
        choice(desc(), dev, gemm_kernel=abi.GEMM_CUTLASS)


@pytest.mark.parametrize("cg", [1, 2, 4, 8, 16, 32, 64, 128, 256])
def test_groups_inside_the_tile_take_cutlass(cg):
    kernel, why = choice(desc(groups=8192 // cg))
    assert cutlass_applies(kernel, why), why


@pytest.mark.parametrize("C,cg,match", [
    (8184, 3, "groups of 3 channels"), (8184, 12, "groups of 12 channels"), (8160, 24, "groups of 24 channels"),
    (8160, 48, "groups of 48 channels"), (8192, 512, "groups of 512 channels do not fit the 256-channel tile"),
    (8191, 1, "C is odd"),
])
def test_groups_the_epilogue_cannot_take_fall_back(C, cg, match):
    d = desc(C=C, groups=C // cg)
    kernel, why = choice(d)
    assert kernel == abi.GEMM_CUBLASLT and match in why
    with pytest.raises(FusedopsError, match=match):
        choice(d, gemm_kernel=abi.GEMM_CUTLASS)


@pytest.mark.parametrize("kw,match", [
    ({"trans_b": 0}, "trans_b = 0"),
    ({"K": 8190}, "K = 8190: rows of X and W are not a multiple of 16 bytes"),
    ({"K": 8188, "dtype": torch.bfloat16}, "K = 8188"),
    ({"K": 0}, "K = 0"),
])
def test_layouts_tma_cannot_load_fall_back(kw, match):
    d = desc(**kw)
    kernel, why = choice(d)
    assert kernel == abi.GEMM_CUBLASLT and match in why
    with pytest.raises(FusedopsError, match=match):
        choice(d, gemm_kernel=abi.GEMM_CUTLASS)


def test_k_with_16_byte_rows_is_fine():
    assert cutlass_applies(*choice(desc(K=8188)))  # float32: 4 elements make 16 bytes


@pytest.mark.parametrize("M,enough", [(9, False), (64, False), (512, False), (640, True), (1000, True), (4096, True)])
def test_too_few_tiles_for_the_sms_stay_on_cublaslt_unless_forced(M, enough):
    # 128 x 256 tiles over C = 8192: 32 a row block; 132 SMs need at least 5 row blocks (M > 512).
    kernel, why = choice(desc(M=M))
    assert cutlass_applies(kernel, why) == enough, why
    if not enough:
        assert kernel == abi.GEMM_CUBLASLT and "fewer than the 132 SMs" in why
    assert choice(desc(M=M), gemm_kernel=abi.GEMM_CUTLASS)[0] == abi.GEMM_CUTLASS


def test_strict_fp32_follows_the_3xtf32_switch_and_the_option():
    d = desc(allow_tf32=0)
    kernel, why = choice(d)
    # The planner's switch (gemm_choice.cpp, kFloat32Uses3xTf32) decides the default; either way the reason says so.
    if kernel == abi.GEMM_CUBLASLT:
        assert "3xTF32 is off" in why
    else:
        assert "CUTLASS 3xtf32" in why
    kernel, why = choice(d, fp32_gemm=2)
    assert kernel == abi.GEMM_CUTLASS and "CUTLASS 3xtf32 coop128x128x32_cluster2_split_barriers:" in why
    kernel, why = choice(d, fp32_gemm=1)
    assert kernel == abi.GEMM_CUBLASLT and "3xTF32 is off" in why
    # fp32_gemm concerns float32 with allow_tf32 = 0 only (TF32 stays held back)
    kernel, why = choice(desc(allow_tf32=1), fp32_gemm=2)
    assert kernel == abi.GEMM_CUBLASLT and "CUTLASS tf32" in why and "held back" in why
    assert "CUTLASS bf16" in choice(desc(dtype=torch.bfloat16, allow_tf32=0), fp32_gemm=1)[1]


def test_the_3xtf32_default_gives_way_to_forced_kernels_and_few_rows():
    """With the switch on (3xTF32 for strict float32 by default), a forced cuBLASLt or skinny kernel runs strict FP32
    instead of failing, automatic plans of few rows keep the skinny kernel, and too few tiles keep cuBLASLt; only an
    explicit fp32_gemm = 2 insists on 3xTF32. The GPU test's shape (2048 x 512 -> 2048) takes the CUTLASS kernel."""
    kernel, why = choice(desc(M=2048, K=512, C=2048, groups=64, allow_tf32=0))
    assert (kernel == abi.GEMM_CUTLASS and "CUTLASS 3xtf32" in why) or "3xTF32 is off" in why, why
    assert choice(desc(allow_tf32=0), gemm_kernel=abi.GEMM_CUBLASLT)[0] == abi.GEMM_CUBLASLT
    assert choice(desc(M=4, allow_tf32=0), gemm_kernel=abi.GEMM_SKINNY)[0] == abi.GEMM_SKINNY
    assert choice(desc(M=4, allow_tf32=0))[0] == abi.GEMM_SKINNY
    assert choice(desc(M=256, K=512, C=1024, groups=64, allow_tf32=0))[0] == abi.GEMM_CUBLASLT  # 16 tiles


def test_forcing_3xtf32_where_it_cannot_run_names_the_reason():
    with pytest.raises(FusedopsError, match=r"\(3xTF32\) is forced: .*sm_89"):
        choice(desc(allow_tf32=0), abi.GemmDevice(8, 9, 128, 1), fp32_gemm=2)
    with pytest.raises(FusedopsError, match="3xTF32 .* runs only in the CUTLASS kernel"):
        choice(desc(allow_tf32=0), fp32_gemm=2, gemm_kernel=abi.GEMM_CUBLASLT)
    with pytest.raises(FusedopsError, match="strict FP32"):
        choice(desc(allow_tf32=0), fp32_gemm=1, gemm_kernel=abi.GEMM_CUTLASS)


def test_automatic_plans_hold_cutlass_back_at_tf32_and_16_bit_only():
    """One rule for what production runs (gemm_choice.cpp): TF32 and 16-bit automatic plans keep cuBLASLt + the
    epilogue where the CUTLASS kernel would apply (measured slower there), strict float32 runs 3xTF32, and a forced
    plan runs CUTLASS at every precision. (Until 2026-11-27 a second switch in gemm_select.cpp did the holding back
    and once overrode the 3xTF32 choice too, unseen by these tests.)"""
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        kernel, why = choice(desc(dtype=dtype))
        assert kernel == abi.GEMM_CUBLASLT and "held back" in why and "gemm_kernel = 2 forces it" in why, why
        assert choice(desc(dtype=dtype), gemm_kernel=abi.GEMM_CUTLASS)[0] == abi.GEMM_CUTLASS
    kernel, why = choice(desc(allow_tf32=0))
    assert kernel == abi.GEMM_CUTLASS and "CUTLASS 3xtf32" in why and "held back" not in why, why


def test_tile_configurations_can_be_picked_for_ab_timing():
    assert "coop128x256x32_cluster2" in choice(desc())[1]
    assert "coop128x256x32:" in choice(desc(), cutlass_config=2)[1]
    assert "pingpong64x256x32_cluster2" in choice(desc(), cutlass_config=3)[1]
    assert "pingpong64x256x64_cluster2" in choice(desc(dtype=torch.bfloat16), cutlass_config=3)[1]
    with pytest.raises(FusedopsError, match="cutlass_config 4: this precision has configurations 1..3"):
        choice(desc(), cutlass_config=4, gemm_kernel=abi.GEMM_CUTLASS)
    with pytest.raises(FusedopsError, match="configurations 1..1"):
        choice(desc(dtype=torch.float16), cutlass_config=2, gemm_kernel=abi.GEMM_CUTLASS)


def test_3xtf32_mainloop_schedules_can_be_picked():
    """3xTF32 has one tile, one CTA or a cluster of two, and two mainloop schedules (three_tf32_mainloop.cuh), picked
    like tile configurations; the reason names the one the plan runs."""
    assert "CUTLASS 3xtf32 coop128x128x32_cluster2_split_barriers:" in choice(desc(allow_tf32=0), fp32_gemm=2)[1]
    kernel, why = choice(desc(allow_tf32=0), fp32_gemm=2, cutlass_config=2)
    assert kernel == abi.GEMM_CUTLASS and "CUTLASS 3xtf32 coop128x128x32_split_barriers:" in why, why
    kernel, why = choice(desc(allow_tf32=0), fp32_gemm=2, cutlass_config=3)
    assert kernel == abi.GEMM_CUTLASS and "CUTLASS 3xtf32 coop128x128x32_named_barrier:" in why, why
    with pytest.raises(FusedopsError, match="cutlass_config 4: this precision has configurations 1..3"):
        choice(desc(allow_tf32=0), fp32_gemm=2, cutlass_config=4)


def test_forced_cublaslt_is_always_possible():
    kernel, why = choice(desc(), gemm_kernel=abi.GEMM_CUBLASLT)
    assert kernel == abi.GEMM_CUBLASLT and "forced" in why


@pytest.mark.parametrize("options,match", [({"gemm_kernel": 4}, "gemm_kernel 4 is not 0"),
                                           ({"fp32_gemm": 3}, "fp32_gemm 3 is not 0"),
                                           ({"cutlass_config": -1}, "cutlass_config -1 is negative")])
def test_bad_options_are_named(options, match):
    with pytest.raises(FusedopsError, match=match):
        choice(desc(), **options)


@pytest.mark.parametrize("M", [1, 2, 7, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_skinny_kernel_takes_up_to_16_rows(M, dtype):
    kernel, why = choice(desc(M=M, dtype=dtype), gemm_kernel=abi.GEMM_SKINNY)
    assert kernel == abi.GEMM_SKINNY and "forced" in why
    # strict FP32 is what the skinny kernel computes (CUDA-core FMA), so allow_tf32 = 0 takes it too
    assert choice(desc(M=M, allow_tf32=0), gemm_kernel=abi.GEMM_SKINNY)[0] == abi.GEMM_SKINNY


@pytest.mark.parametrize("kw,options,match", [
    ({"M": 17}, {}, r"M = 17 rows \(it takes 1..16\)"),
    ({"M": 0}, {}, r"M = 0 rows"),
    ({"M": 4, "trans_b": 0}, {}, r"W is \(K, C\) \(trans_b = 0\)"),
    ({"M": 4, "K": 8190}, {}, "K = 8190: rows of X and W are not a multiple of 16 bytes"),
    ({"M": 4, "K": 8188, "dtype": torch.float16}, {}, "K = 8188"),
    ({"M": 4, "K": 0}, {}, "K = 0"),
    ({"M": 4, "allow_tf32": 0}, {"fp32_gemm": 2}, "3xTF32 .* runs only in the CUTLASS kernel"),
])
def test_forcing_the_skinny_kernel_where_it_cannot_run_names_the_reason(kw, options, match):
    with pytest.raises(FusedopsError, match="the skinny kernel is forced: " + match):
        choice(desc(**kw), gemm_kernel=abi.GEMM_SKINNY, **options)


@pytest.mark.parametrize("dtype,rows", [(torch.float32, 8), (torch.float16, 4), (torch.bfloat16, 0)])
def test_automatic_plans_take_the_skinny_kernel_up_to_the_measured_rows(dtype, rows):
    """The rows where the skinny kernel measured faster than cuBLASLt (H200, docs/kernels.md): float32 up to 8
    (TF32 and strict alike), float16 up to 4, bfloat16 never."""
    for M in range(1, 18):
        for allow_tf32 in (1, 0):
            kernel, why = choice(desc(M=M, dtype=dtype, allow_tf32=allow_tf32))
            if M <= rows:
                assert kernel == abi.GEMM_SKINNY and why == f"skinny: {M} rows, the GEMM is a read of W", (M, why)
            else:
                assert kernel == abi.GEMM_CUBLASLT, (M, why)
    assert choice(desc(M=1, trans_b=0))[0] == abi.GEMM_CUBLASLT
    assert choice(desc(M=1, K=8190))[0] == abi.GEMM_CUBLASLT
    assert choice(desc(M=1), gemm_kernel=abi.GEMM_CUBLASLT)[0] == abi.GEMM_CUBLASLT
    assert choice(desc(M=1, allow_tf32=0), fp32_gemm=2)[0] == abi.GEMM_CUTLASS  # 3xTF32 asked for: CUTLASS
    # a forced kernel wins over the automatic skinny choice (it did not: the GPU tests of the forced CUTLASS kernel
    # at M = 1 ran the skinny kernel, found on the H200 2026-11-26)
    assert choice(desc(M=1), gemm_kernel=abi.GEMM_CUTLASS)[0] == abi.GEMM_CUTLASS


def test_only_complete_gemm_descriptors_are_judged():
    gn = catalog.GROUP_NORM_ACT.name
    d, _ = abi.describe(abi.parse_attributes(gn, catalog.parse_attrs(gn, {"num_groups": 2})),
                        [abi.tensor_desc(torch.float32, (2, 4, 3))] + [abi.tensor_desc(torch.float32, (4,))] * 2)
    with pytest.raises(FusedopsError, match="GemmGroupNormAct only"):
        choice(d)
    incomplete = abi.parse_attributes(GEMM, catalog.parse_attrs(GEMM, {"num_groups": 2}))
    with pytest.raises(FusedopsError, match="incomplete or invalid descriptor"):
        choice(incomplete)


def test_the_library_says_whether_it_has_the_cutlass_kernels():
    assert abi.has_cutlass() in (True, False)
    if not abi.has_cuda():
        assert not abi.has_cutlass()
