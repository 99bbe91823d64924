"""Prepared weights (fusedops_plan_prepare_weights / fusedops_plan_run_prepared) on the GPU: W split once into its
TF32 hi and lo parts, which the 3xTF32 CUTLASS kernel then loads instead of splitting W in every call.

The kernel on prepared weights must give the bits of the kernel that splits W itself (the same split, the same
products in the same order), so every check here is bit equality against that kernel plus the float64 reference.
Needs an sm_90 GPU and a library built with the CUTLASS kernels; skips with the reason otherwise. Inputs are fresh
random values, outputs and prepared buffers start poisoned (NaN / 0xFF bytes).
"""

from __future__ import annotations

import pytest
import torch

from fusedops.errors import FusedopsError

from kernel_support import SKIP_REASON, cutlass_skip_reason

pytestmark = pytest.mark.gpu
_SKIP = SKIP_REASON or cutlass_skip_reason()
if _SKIP:
    pytest.skip(_SKIP, allow_module_level=True)

from fusedops.plugins import abi  # noqa: E402

from gemm_plan_helpers import DEV, attrs, inputs, plan_for, ref, run  # noqa: E402

THREE_TF32 = abi.PlanOptions(gemm_kernel=abi.GEMM_CUTLASS, fp32_gemm=2)


def stream() -> int:
    return torch.cuda.current_stream().cuda_stream


def prepare(plan, w: torch.Tensor) -> torch.Tensor:
    prepared = torch.full((plan.prepared_weights,), 0xFF, dtype=torch.uint8, device=DEV)
    plan.prepare_weights(w.data_ptr(), prepared.data_ptr(), prepared.numel(), stream())
    return prepared


def run_prepared(tensors, a, prepared=None, options=THREE_TF32, plan=None, x_view=None):
    """One call of a plan (fresh unless given) with W's prepared form; returns (Y, plan)."""
    if plan is None:
        plan, _ = plan_for(tensors, a, options)
    if prepared is None:
        prepared = prepare(plan, tensors[1])
    x = tensors[0] if x_view is None else x_view
    y = torch.full((x.shape[0], 1 if a.reduce else tensors[1].shape[0]), float("nan"), device=DEV)
    ws = torch.full((max(plan.workspace, 1),), 0xFF, dtype=torch.uint8, device=DEV)
    ptrs = [x.data_ptr()] + [t.data_ptr() if t is not None else None for t in tensors[1:]]
    plan.run(ptrs, y.data_ptr(), ws.data_ptr(), plan.workspace, stream(), prepared.data_ptr())
    torch.cuda.synchronize()
    return y, plan


@pytest.mark.parametrize("M,K,C,G,reduce", [(1000, 520, 1024, 64, ""), (2048, 4096, 2048, 128, "min"),
                                            (3, 40, 256, 16, ""), (1, 8192, 512, 32, "logsumexp")])
def test_prepared_weights_give_the_bits_of_the_in_kernel_split(M, K, C, G, reduce):
    """Partial tiles in M and K, a reduction, batch 1 and 3, both presplit kernels (one CTA, a cluster of two): the
    same bits as the kernel splitting W itself, and within 3xTF32's 1e-3 of float64."""
    x, w, b, gamma, beta, extras = inputs(M, K, C, M + 7)
    a = attrs(num_groups=G, pre="add(@0);hardtanh(-3,3)", post="relu", reduce=reduce, allow_tf32=0)
    want, kernels = run(x, w, b, gamma, beta, extras, a, THREE_TF32)
    assert kernels.startswith("cutlass_gn_gemm(3xtf32,") and "[prepared weights: coop128x128x32_cluster2_presplit_w]" in \
        kernels, kernels
    for config, twin in [(1, "coop128x128x32_cluster2_presplit_w"), (2, "coop128x128x32_presplit_w")]:
        options = abi.PlanOptions(gemm_kernel=abi.GEMM_CUTLASS, fp32_gemm=2, cutlass_config=config)
        got, plan = run_prepared([x, w, b, gamma, beta, *extras], a, options=options)
        assert f"[prepared weights: {twin}]" in plan.kernels, plan.kernels
        assert plan.prepared_weights == 2 * C * K * 4
        assert not torch.isnan(got).any(), "an element was not written"
        assert torch.equal(got, want), f"{twin}: max difference {(got - want).abs().max().item():.3g}"
    torch.testing.assert_close(got.cpu().double(), ref(x, w, b, gamma, beta, extras, a), rtol=1e-3, atol=1e-3)


def test_the_prepared_form_is_w_split_into_tf32_hi_and_lo():
    """hi has TF32's 10 mantissa bits (the low 13 bits zero), hi + lo == W exactly, |lo| <= half a TF32 ulp of W."""
    x, w, b, gamma, beta, extras = inputs(64, 1024, 256, 3)
    w = w * torch.logspace(-20, 20, w.shape[1], device=DEV)  # a wide exponent range
    plan, _ = plan_for([x, w, b, gamma, beta, *extras], attrs(num_groups=16, allow_tf32=0), THREE_TF32)
    prepared = prepare(plan, w)
    torch.cuda.synchronize()
    hi, lo = prepared.view(torch.float32).view(2, *w.shape)
    assert (hi.view(torch.int32) & 0x1FFF).eq(0).all()
    assert torch.equal(hi + lo, w)
    assert (lo.abs() <= w.abs() * 2.0 ** -11).all()


def test_plans_that_take_no_prepared_weights_say_so_and_ignore_a_buffer():
    """A TF32 plan (and a cuBLASLt one) has nothing to prepare: size 0, preparing is a clear error, and a prepared
    buffer passed to its run is not read (it holds poison here)."""
    x, w, b, gamma, beta, extras = inputs(256, 512, 512, 5)
    tensors = [x, w, b, gamma, beta, *extras]
    a = attrs(num_groups=32, allow_tf32=1)
    plan, _ = plan_for(tensors, a, abi.PlanOptions(gemm_kernel=abi.GEMM_CUTLASS))
    assert plan.prepared_weights == 0
    poison = torch.full((2 * w.numel() * 4,), 0xFF, dtype=torch.uint8, device=DEV)
    with pytest.raises(FusedopsError, match="takes no prepared weights"):
        plan.prepare_weights(w.data_ptr(), poison.data_ptr(), poison.numel(), stream())
    got, _ = run_prepared(tensors, a, prepared=poison, plan=plan)
    want, _ = run(x, w, b, gamma, beta, extras, a, abi.PlanOptions(gemm_kernel=abi.GEMM_CUTLASS))
    assert torch.equal(got, want)


def test_bad_prepared_buffers_are_rejected_with_the_reason():
    x, w, b, gamma, beta, extras = inputs(256, 512, 512, 6)
    tensors = [x, w, b, gamma, beta, *extras]
    a = attrs(num_groups=32, allow_tf32=0)
    plan, _ = plan_for(tensors, a, THREE_TF32)
    buf = torch.empty(plan.prepared_weights + 16, dtype=torch.uint8, device=DEV)
    with pytest.raises(FusedopsError, match="prepared buffer of 100 bytes"):
        plan.prepare_weights(w.data_ptr(), buf.data_ptr(), 100, stream())
    with pytest.raises(FusedopsError, match="16-byte aligned"):
        plan.prepare_weights(w.data_ptr(), buf.data_ptr() + 4, plan.prepared_weights, stream())
    y = torch.empty(256, 512, device=DEV)
    ws = torch.empty(max(plan.workspace, 1), dtype=torch.uint8, device=DEV)
    with pytest.raises(FusedopsError, match="not 16-byte aligned"):
        plan.run([t.data_ptr() for t in tensors], y.data_ptr(), ws.data_ptr(), plan.workspace, stream(),
                 buf.data_ptr() + 4)


def test_a_call_the_kernel_cannot_take_runs_cublaslt_on_w():
    """X misaligned for TMA: the plan runs its cuBLASLt path, which reads W, not the prepared form (poisoned here,
    so reading it would show)."""
    x, w, b, gamma, beta, extras = inputs(129, 512, 512, 8)
    tensors = [x, w, b, gamma, beta, *extras]
    a = attrs(num_groups=32, allow_tf32=0)
    storage = torch.empty(129 * 512 + 1, device=DEV)
    x_view = storage[1:].view(129, 512)
    x_view.copy_(x)
    plan, _ = plan_for(tensors, a, THREE_TF32)
    poison = torch.full((plan.prepared_weights,), 0xFF, dtype=torch.uint8, device=DEV)
    got, _ = run_prepared(tensors, a, prepared=poison, plan=plan, x_view=x_view)
    torch.testing.assert_close(got.cpu().double(), ref(x, w, b, gamma, beta, extras, a), rtol=1e-4, atol=1e-4)


def test_prepared_runs_are_capturable_and_one_form_serves_every_batch_size():
    """The form depends on W only: a plan of another batch size takes the same buffer; a run is capturable in a CUDA
    graph and its replay gives the same bits."""
    x, w, b, gamma, beta, extras = inputs(512, 1024, 1024, 9)
    a = attrs(num_groups=64, post="silu", allow_tf32=0)
    small, _ = plan_for([x[:130], w, b, gamma, beta, *extras], a, THREE_TF32)
    prepared = prepare(small, w)
    got_small, _ = run_prepared([x[:130], w, b, gamma, beta, *extras], a, prepared=prepared, plan=small)
    want_small, _ = run(x[:130], w, b, gamma, beta, extras, a, THREE_TF32)
    assert torch.equal(got_small, want_small)
    plan, _ = plan_for([x, w, b, gamma, beta, *extras], a, THREE_TF32)
    y = torch.full((512, 1024), float("nan"), device=DEV)
    ws = torch.empty(max(plan.workspace, 1), dtype=torch.uint8, device=DEV)
    ptrs = [t.data_ptr() for t in [x, w, b, gamma, beta, *extras]]
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        plan.run(ptrs, y.data_ptr(), ws.data_ptr(), plan.workspace, s.cuda_stream, prepared.data_ptr())
    y.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    want, _ = run(x, w, b, gamma, beta, extras, a, THREE_TF32)
    assert torch.equal(y, want)


# ---------------------------------------------------------------------------------------------------------------------
# The PyTorch op keeps one prepared form per weight tensor (plugins/torch/prepared_weights.cpp)
# ---------------------------------------------------------------------------------------------------------------------

def _op_inputs(seed):
    # 1280 x 2048 output: 160 tiles of 128 x 128, enough for every SM, so a strict-FP32 plan runs 3xTF32.
    return inputs(1280, 512, 2048, seed)


def _op(torch_ops, x, w, b, gamma, beta, extras):
    return torch_ops.gemm_group_norm_act(x, w, b, gamma, beta, extras, 64, post="silu", allow_tf32=0)


@pytest.fixture
def torch_ops():
    from fusedops.plugins import torch_ops as ops
    ok, why = ops.cuda_kernels_available()
    if not ok:
        pytest.skip(f"needs the fusedops PyTorch ops: {why}")
    ops.set_prepared_weights(True)  # also forgets what earlier tests kept
    yield ops
    ops.set_prepared_weights(True)


def _count():
    return torch.ops.fusedops._prepared_weights_count()


def test_the_op_prepares_a_weight_once_and_follows_its_changes(torch_ops):
    """First call: W is prepared and kept; the output is the kernel's own split's bits. An in-place change of W
    (a version bump) makes a new form: the output follows the new W. A dead W's form goes at the next insertion."""
    x, w, b, gamma, beta, extras = _op_inputs(11)
    a = attrs(num_groups=64, post="silu", allow_tf32=0)
    before = _count()
    got = _op(torch_ops, x, w, b, gamma, beta, extras)
    assert _count() == before + 1
    want, kernels = run(x, w, b, gamma, beta, extras, a, abi.PlanOptions(fp32_gemm=2))
    assert kernels.startswith("cutlass_gn_gemm(3xtf32,"), kernels
    assert torch.equal(got, want)
    assert torch.equal(_op(torch_ops, x, w, b, gamma, beta, extras), want)  # the kept form, unchanged W
    with torch.no_grad():
        w.mul_(-1.5)  # in place: autograd's version counter moves
    got2 = _op(torch_ops, x, w, b, gamma, beta, extras)
    want2, _ = run(x, w, b, gamma, beta, extras, a, abi.PlanOptions(fp32_gemm=2))
    assert torch.equal(got2, want2) and not torch.equal(got2, want)
    assert _count() == before + 1  # replaced, not added
    w2 = w.clone()
    del w
    _op(torch_ops, x, w2, b, gamma, beta, extras)  # a new weight: the dead one's form is dropped
    assert _count() == before + 1


def test_the_op_keeps_nothing_when_switched_off_inside_graphs_or_for_inference_tensors(torch_ops):
    x, w, b, gamma, beta, extras = _op_inputs(12)
    a = attrs(num_groups=64, post="silu", allow_tf32=0)
    want, _ = run(x, w, b, gamma, beta, extras, a, abi.PlanOptions(fp32_gemm=2))
    torch_ops.set_prepared_weights(False)
    assert torch.equal(_op(torch_ops, x, w, b, gamma, beta, extras), want) and _count() == 0
    torch_ops.set_prepared_weights(True)
    with torch.inference_mode():
        w_inf = w.clone()
    assert torch.equal(_op(torch_ops, x, w_inf, b, gamma, beta, extras), want) and _count() == 0
    _op(torch_ops, x[:8], w, b, gamma, beta, extras)  # warm the other plans' caches outside capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _op(torch_ops, x, w, b, gamma, beta, extras)  # the plan exists before capture (a fresh form is kept here)
    torch.cuda.synchronize()
    torch_ops.forget_prepared_weights()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        y = _op(torch_ops, x, w, b, gamma, beta, extras)
    assert _count() == 0, "a form written only at replay must not be kept"
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, want)
