"""TensorRT plugins enqueued on the GPU through the headers-only harness, compared with eager PyTorch.

ConvTransposeGroupNormAct (added 2026-11-27, not yet run on a GPU): model 4 as one node against the eager model
(ConvTranspose2d + GELU + GroupNorm), and odd shapes with and without B against the catalog's float64 reference.

The harness (tests/trt_harness) walks each plugin through TensorRT's calls and enqueues it on device buffers with
the output NaN-poisoned; this file writes the inputs (the reference models' own weights and fresh uniform inputs, at
benchmark and odd sizes), and compares the output with the model in eager PyTorch (TF32 tolerance 1e-2, the models'
acceptance rule) or with the catalog's float64 reference (strict FP32 1e-4; fp16 / bf16 16-bit bounds).
Needs a CUDA device, the TensorRT headers and the CUDA kernels (cuBLASLt); skips with the reason otherwise.
Set FUSEDOPS_TRT_TIMINGS=path.json to collect the enqueue timings.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from fusedops import catalog
from fusedops.convtranspose import ConvAttrs
from fusedops.errors import FusedopsError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for the harness driver
from trt_harness import driver as H  # noqa: E402

pytestmark = pytest.mark.gpu

TIMINGS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def build():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if H.tensorrt_include_dir() is None:
        pytest.skip("TensorRT headers not found; see scripts/get_tensorrt_headers.md")
    try:
        b = H.build_harness()
    except FusedopsError as e:
        pytest.skip(f"plugin library not buildable here: {e}")
    if not b.real_kernels:
        pytest.skip("the CUDA kernels (cuBLASLt) were not built, only the build-phase plugin")
    yield b
    path = os.environ.get("FUSEDOPS_TRT_TIMINGS")
    if path and TIMINGS:
        with open(path, "w") as f:
            json.dump(TIMINGS, f, indent=1)


def _record(name: str, r: H.HarnessResult, err: float):
    TIMINGS[name] = {k: r.report[k] for k in ("enqueue_ms_median", "enqueue_ms_min", "enqueue_host_us_median",
                                              "workspace_bytes", "output_shape") if k in r.report}
    TIMINGS[name]["max_abs_err"] = err
    print(f"{name}: {TIMINGS[name]}")


# Model 4 at its benchmark size is a 2.2 GB tensor each way through files; by default batch 16 keeps the round trip
# short with the per-sample shape (64 x 258 x 258) at benchmark size. FUSEDOPS_TRT_FULL_BENCH=1 runs batch 128.
FULL_BENCH = os.environ.get("FUSEDOPS_TRT_FULL_BENCH") == "1"
MODELS = ["matmul_groupnorm_leakyrelu_sum", "gemm_groupnorm_min_biasadd", "gemm_biasadd_hardtanh_mish_groupnorm",
          "convtranspose2d_gelu_groupnorm"]


@pytest.mark.parametrize("key", MODELS)
@pytest.mark.parametrize("size,odd_batch", [("small", None), ("small", 37), ("bench", None), ("bench", 333)])
def test_model_case_matches_eager(build, tmp_path, key, size, odd_batch):
    batch = odd_batch
    if key == "convtranspose2d_gelu_groupnorm" and size == "bench":
        batch = (None if FULL_BENCH else 16) if odd_batch is None else 3
    case, finish, eager = H.model_case(key, size, batch=batch, device="cuda", seed=1)
    r = H.run_case(build, case, tmp_path, enqueue=True, iters=10 if size == "bench" else 0)
    assert r.ok, (r.report, r.stderr[-2000:])
    assert not torch.isnan(r.output).any(), "output left unwritten (NaN poison) or NaN produced"
    got = finish(r.output.to(eager.device))
    assert got.shape == eager.shape
    err = (got - eager).abs().max().item()
    _record(f"{key}/{size}/batch={batch or 'default'}", r, err)
    torch.testing.assert_close(got, eager, rtol=1e-2, atol=1e-2)


def _reference(case: H.HarnessCase, attrs: catalog.FusedAttrs):
    t = {i.name: i.data.double() for i in case.inputs}
    extras = [t[k] for k in sorted(t) if k.startswith("extra_")]
    if case.op == "GroupNormAct":
        return catalog.group_norm_act_reference(t["X"], t["gamma"], t["beta"], extras, attrs)
    if case.op == "ConvTransposeGroupNormAct":  # B may be absent
        return catalog.convtranspose_group_norm_act_reference(t["X"], t["W"], t.get("B"), t["gamma"], t["beta"],
                                                              extras, attrs)
    return catalog.gemm_group_norm_act_reference(t["X"], t["W"], t["B"], t["gamma"], t["beta"], extras, attrs)


DTYPE_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape,trans_b,reduce", [((37, 129), 1, ""), ((5, 7, 65), 0, ""), ((37, 129), 1, "mean")])
def test_gemm_strict_and_16bit_against_float64(build, tmp_path, dtype, shape, trans_b, reduce):
    g = torch.Generator().manual_seed(7)
    C, K = 96, shape[-1]
    attrs = catalog.FusedAttrs(num_groups=6, pre=catalog.parse_chain("add(@0);silu"),
                               post=catalog.parse_chain("hardtanh(-2,2)"), reduce=reduce, trans_b=trans_b,
                               allow_tf32=0)
    x = torch.rand(*shape, generator=g).to(dtype)
    w = (torch.randn(C, K, generator=g) / K ** 0.5).to(dtype)
    if not trans_b:
        w = w.t().contiguous()
    params = [torch.randn(C, generator=g) for _ in range(4)]
    inputs = [H.HarnessInput.of("X", x), H.HarnessInput.of("W", w), H.HarnessInput.of("B", params[0]),
              H.HarnessInput.of("gamma", params[1]), H.HarnessInput.of("beta", params[2]),
              H.HarnessInput.of("extra_0", params[3])]
    case = H.HarnessCase("GemmGroupNormAct", H.fields_from_attrs("GemmGroupNormAct", attrs), inputs)
    r = H.run_case(build, case, tmp_path, enqueue=True)
    assert r.ok, (r.report, r.stderr[-2000:])
    ref = _reference(case, attrs)
    got = r.output.double()
    assert not torch.isnan(got).any()
    tol = DTYPE_TOL[dtype]
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,param_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float32),
                                               (torch.bfloat16, torch.bfloat16)])
@pytest.mark.parametrize("shape,reduce", [((3, 12, 17, 19), ""), ((2, 12, 5, 6, 7), "logsumexp"), ((9, 12), "")])
def test_group_norm_act_against_float64(build, tmp_path, dtype, param_dtype, shape, reduce):
    g = torch.Generator().manual_seed(11)
    C = shape[1]
    attrs = catalog.FusedAttrs(num_groups=4, pre=catalog.parse_chain("gelu"),
                               post=catalog.parse_chain("mul(@0);leaky_relu(0.1)"), reduce=reduce)
    x = (torch.randn(*shape, generator=g) * 3 + 1).to(dtype)
    params = [torch.randn(C, generator=g).to(param_dtype) for _ in range(3)]
    inputs = [H.HarnessInput.of("X", x), H.HarnessInput.of("gamma", params[0]), H.HarnessInput.of("beta", params[1]),
              H.HarnessInput.of("extra_0", params[2])]
    case = H.HarnessCase("GroupNormAct", H.fields_from_attrs("GroupNormAct", attrs), inputs, dynamic="all")
    r = H.run_case(build, case, tmp_path, enqueue=True)
    assert r.ok, (r.report, r.stderr[-2000:])
    got = r.output.double()
    assert not torch.isnan(got).any()
    tol = DTYPE_TOL[dtype]
    torch.testing.assert_close(got, _reference(case, attrs), rtol=tol, atol=tol)


def test_bad_runtime_shapes_refused_at_shape_change(build, tmp_path):
    """A runtime shape the kernels cannot take, hidden from the build phase by a fully dynamic X (built at C = 12),
    is refused by onShapeChange with the reason logged, and never launched."""
    attrs = catalog.FusedAttrs(num_groups=4)
    inputs = [H.HarnessInput("X", (3, 12, 5), data=torch.rand(3, 10, 5)),
              H.HarnessInput("gamma", (12,), data=torch.ones(10)), H.HarnessInput("beta", (12,), data=torch.zeros(10))]
    case = H.HarnessCase("GroupNormAct", H.fields_from_attrs("GroupNormAct", attrs), inputs, dynamic="all",
                         expect_fail="shape_change",
                         runtime={"X": (torch.float32, (3, 10, 5)), "gamma": (torch.float32, (10,)),
                                  "beta": (torch.float32, (10,))})
    r = H.run_case(build, case, tmp_path, enqueue=True)
    assert r.ok, r.report
    assert r.stages[-1] == "attach"
    assert any("onShapeChange" in e and "divisible" in e for e in r.report["plugin_errors"]), r.report


def test_enqueue_refuses_descriptions_it_was_not_configured_for(build, tmp_path):
    """enqueue re-checks its own descriptions (here W as bfloat16 beside float32 X) before launching anything."""
    x, w = torch.rand(4, 8), torch.rand(8, 8)
    inputs = [H.HarnessInput.of("X", x), H.HarnessInput.of("W", w)] + [
        H.HarnessInput.of(n, torch.rand(8)) for n in ("B", "gamma", "beta")]
    case = H.HarnessCase("GemmGroupNormAct", H.fields_from_attrs("GemmGroupNormAct", catalog.FusedAttrs(num_groups=4)),
                         inputs, expect_fail="enqueue", enqueue_only={"W": (torch.bfloat16, (8, 8))})
    r = H.run_case(build, case, tmp_path, enqueue=True)
    assert r.ok, r.report
    assert any("enqueue" in e and "W is bfloat16" in e for e in r.report["plugin_errors"]), r.report


@pytest.mark.parametrize("shape,groups,profile", [((64, 64, 64, 64), 32, (1, 64, 64)), ((8, 64, 4096), 32, (1, 8, 80))])
def test_workspace_covers_every_batch_with_the_real_planner(build, tmp_path, shape, groups, profile):
    """getWorkspaceSize over the profile >= the CUDA planner's need at every single batch in it (the need is not
    monotone: batch 9 of (N, 64, 64, 64) with 32 groups needs more than batch 64)."""
    attrs = catalog.FusedAttrs(num_groups=groups)
    C = shape[1]
    inputs = [H.HarnessInput("X", shape), H.HarnessInput("gamma", (C,)), H.HarnessInput("beta", (C,))]
    case = H.HarnessCase("GroupNormAct", H.fields_from_attrs("GroupNormAct", attrs), inputs, profile_batch=profile,
                         workspace_probe=True)
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report
    assert r.report["workspace_bytes"] >= max(r.report["workspace_probe"]["needs"])


def test_batch_inside_the_profile_enqueues_with_the_reserved_workspace(build, tmp_path):
    """Profile 1..64 at (N, 64, 64, 64), run at batch 9 (more workspace than batch 1 or 64): computes correctly."""
    g = torch.Generator().manual_seed(3)
    attrs = catalog.FusedAttrs(num_groups=32)
    x = torch.randn(9, 64, 64, 64, generator=g)
    params = [torch.randn(64, generator=g) for _ in range(2)]
    inputs = [H.HarnessInput("X", (64, 64, 64, 64), data=x), H.HarnessInput.of("gamma", params[0]),
              H.HarnessInput.of("beta", params[1])]
    case = H.HarnessCase("GroupNormAct", H.fields_from_attrs("GroupNormAct", attrs), inputs, profile_batch=(1, 64, 64),
                         runtime={"X": (torch.float32, (9, 64, 64, 64))})
    r = H.run_case(build, case, tmp_path, enqueue=True)
    assert r.ok, (r.report, r.stderr[-2000:])
    ref = catalog.group_norm_act_reference(x.double(), params[0].double(), params[1].double(), [], attrs)
    torch.testing.assert_close(r.output.double(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size,batch", [("small", None), ("small", 37), ("bench", 3), ("bench", None)])
def test_model4_as_one_convtranspose_node_matches_eager(build, tmp_path, size, batch):
    """Model 4 (ConvTranspose2d -> GELU -> GroupNorm) as one ConvTransposeGroupNormAct enqueue (TF32, as the eager
    model's cuDNN convolution) against the eager model, the models' acceptance rule."""
    if size == "bench" and batch is None:
        batch = None if FULL_BENCH else 16
    case, finish, eager = H.model_case("convtranspose2d_gelu_groupnorm", size, batch=batch, device="cuda", seed=1,
                                       fuse_conv=True)
    r = H.run_case(build, case, tmp_path, enqueue=True, iters=10 if size == "bench" else 0)
    assert r.ok, (r.report, r.stderr[-2000:])
    assert not torch.isnan(r.output).any(), "output left unwritten (NaN poison) or NaN produced"
    got = finish(r.output.to(eager.device))
    assert got.shape == eager.shape
    _record(f"convtranspose_one_node/{size}/batch={batch or 'default'}", r, (got - eager).abs().max().item())
    torch.testing.assert_close(got, eager, rtol=1e-2, atol=1e-2)


CONVT_CASES = {  # X, W, num_groups, B given, ConvTranspose attributes, reduce
    "stride2_pads_outpad": ((3, 16, 9, 11), (16, 24, 3, 3), 6, True,
                            dict(strides=(2, 2), pads=(1, 1, 1, 1), output_padding=(1, 1)), ""),
    "one_d_no_bias": ((3, 20, 40), (20, 40, 5), 8, False, dict(strides=(2,), pads=(2, 1), output_padding=(1,)), ""),
    # (no channel reduction: the CUDA convolution has none; tests/test_trt_harness.py checks the refusal)
    "groups2_dilation": ((2, 12, 7, 9), (12, 10, 3, 3), 5, True, dict(group=2, dilations=(2, 2), pads=(2, 2, 2, 2)), ""),
}
# float32 strict (allow_tf32 = 0: 3xTF32, 2.6e-5 measured by tests/gpu/test_convt_gpu.py); 16-bit: Y and the
# normalised intermediate rounded to 16 bits (that file's floors: 8e-3 / 6e-2 against 1.5x eager's error)
CONVT_TOL = {torch.float32: 2e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}


@pytest.mark.parametrize("dtype,param_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float32),
                                               (torch.bfloat16, torch.bfloat16)])
@pytest.mark.parametrize("name", sorted(CONVT_CASES))
def test_convtranspose_against_float64(build, tmp_path, name, dtype, param_dtype):
    x_shape, w_shape, groups, bias, conv, reduce = CONVT_CASES[name]
    g = torch.Generator().manual_seed(13)
    attrs = catalog.FusedAttrs(num_groups=groups, pre=catalog.parse_chain("gelu"), reduce=reduce, allow_tf32=0,
                               post=catalog.parse_chain("mul(@0);leaky_relu(0.1)"), conv=ConvAttrs(**conv))
    C = w_shape[1] * attrs.conv.group
    x = (torch.randn(*x_shape, generator=g) * 1.5 + 0.2).to(dtype)
    w = (torch.randn(*w_shape, generator=g) / (w_shape[0] * w_shape[2]) ** 0.5).to(dtype)
    params = {"B": torch.randn(C, generator=g) * 0.3, "gamma": torch.rand(C, generator=g) + 0.5,
              "beta": torch.randn(C, generator=g) * 0.5, "extra_0": torch.randn(C, generator=g)}
    inputs = [H.HarnessInput.of("X", x), H.HarnessInput.of("W", w)] + [
        H.HarnessInput.of(n, t.to(param_dtype)) for n, t in params.items() if bias or n != "B"]
    op = "ConvTransposeGroupNormAct"
    case = H.HarnessCase(op, H.fields_from_attrs(op, attrs), inputs, dynamic="all")
    r = H.run_case(build, case, tmp_path, enqueue=True)
    assert r.ok, (r.report, r.stderr[-2000:])
    got = r.output.double()
    assert not torch.isnan(got).any(), "output left unwritten (NaN poison) or NaN produced"
    ref = _reference(case, attrs)
    assert got.shape == ref.shape
    tol = CONVT_TOL[dtype]
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)
