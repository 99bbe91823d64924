"""GPU tests of the four fused models (ModelNew) against float64 references and eager PyTorch (the ops at awkward
shapes: test_fused_ops_gpu.py; shared fixture and tolerances: model_support.py).

Tolerances (max |got - ref| allowed, as rtol/atol of torch.testing.assert_close against the float64 reference):
  strict FP32 (torch.get_float32_matmul_precision() == "highest", cuDNN TF32 off): 1e-4 / 1e-4
  TF32: 1e-2 / 1e-2 (the reference models' own acceptance rule)
  16-bit (fp16 / bf16 weights and inputs): the fused op must be no less accurate than eager PyTorch in the same
  type (≤ 1.25 × eager's max error, or ≤ the measured floor below), and within 16-bit bounds: GroupNorm divides the
  GEMM's rounding error (2^-8 relative for bf16, 2^-11 for fp16) by the group std, so a few ulp of the unit-scale
  output: bf16 5e-2, fp16 1e-2 as rtol/atol. Measured on the H200 (2026-11-22), max |fused - float64| at bench
  size, models 1-4: bf16 3.3e-2 / 2.8e-2 / 1.5e-2 / 7.5e-2 (eager bf16 4.3e-2 / 3.4e-2 / 3.2e-2 / 9.3e-2), fp16
  3.8e-3 / 3.3e-3 / 1.5e-3 / 6.7e-3 (eager 5.1e-3 / 4.3e-3 / 2.9e-3 / 8.0e-3), on outputs up to ~6 in magnitude.
Outputs are poisoned before kernels run: this module turns on torch_ops.set_poison_outputs (and
FUSEDOPS_POISON_OUTPUTS=1 for the ABI binding), so every output (and workspace) the ops and the fused models allocate
starts as NaN (0xFF bytes); every input is NaN-free, so a NaN in an output is an element no kernel wrote (or a
workspace byte read before it was written).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fusedops.models import get_entry
from fusedops.plugins import torch_ops
from model_support import _REF64, KEYS, TOL, TOL_16, _gen, _max_err, _params, precision
from model_support import _need_cuda_kernels  # noqa: F401 - autouse module fixture, applies by being here
from kernel_support import run_in_threads

pytestmark = pytest.mark.gpu


# ---------------------------------------------------------------------------------------------------------------------
# The four models at benchmark size
# ---------------------------------------------------------------------------------------------------------------------

def _bench_case(key):
    """(Model fp32, ModelNew fp32, input fp32, float64 reference output) on the GPU, built once a module run."""
    if key not in _REF64:
        _REF64.clear()
        torch.cuda.empty_cache()
        entry = get_entry(key)
        ref = entry.build("bench", seed=0).cuda()
        new = entry.build("bench", cls_name="ModelNew", seed=0).cuda()
        (x,) = entry.inputs("bench", generator=_gen(42), device="cuda")
        with torch.no_grad():
            want = copy.deepcopy(ref).double()(x.double())
        _REF64[key] = (ref, new, x, want)
    return _REF64[key]


@pytest.mark.parametrize("p", ["fp32", "tf32"])
@pytest.mark.parametrize("key", KEYS)
def test_model_bench_size_float32(key, p):
    ref, new, x, want = _bench_case(key)
    with precision(p), torch.no_grad():
        got = new(x)
        eager = ref(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert not torch.isnan(got).any(), "NaN in the output of NaN-free inputs (unwritten output?)"
    rtol, atol = TOL[p]
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
    torch.testing.assert_close(got, eager, rtol=2 * rtol, atol=2 * atol)
    print(f"{key} {p}: max err vs float64 fused {_max_err(got, want):.2e}, eager {_max_err(eager, want):.2e}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("key", KEYS)
def test_model_16bit(key, dtype):
    """Benchmark size for bf16 (the benchmarked 16-bit type); fp16 at batch 64 (4 for model 4) to save time."""
    entry = get_entry(key)
    batch = None if dtype == torch.bfloat16 else (4 if entry.number == 4 else 64)
    ref = entry.build("bench", seed=0).cuda().to(dtype)
    new = entry.build("bench", cls_name="ModelNew", seed=0).cuda().to(dtype)
    (x,) = entry.inputs("bench", batch=batch, generator=_gen(43), device="cuda", dtype=dtype)
    with torch.no_grad():
        got, eager = new(x), ref(x)
        want = copy.deepcopy(ref).double()(x.double())  # the same 16-bit weights and input, float64 math
    del ref
    assert got.dtype == dtype and not torch.isnan(got).any()
    e_fused, e_eager = _max_err(got, want), _max_err(eager, want)
    print(f"{key} {dtype}: max err vs float64 fused {e_fused:.3e}, eager {e_eager:.3e}")
    assert e_fused <= max(1.25 * e_eager, TOL_16[dtype] / 4), (e_fused, e_eager)
    torch.testing.assert_close(got.double(), want, rtol=TOL_16[dtype], atol=TOL_16[dtype])


@pytest.mark.parametrize("batch", [1, 3, 1000])
@pytest.mark.parametrize("key", KEYS)
def test_model_awkward_batches(key, batch):
    """Benchmark feature sizes at batches 1, 3, 1000 (model 4: small spatial size, batch 1000 of it)."""
    entry = get_entry(key)
    size = "small" if entry.number == 4 else "bench"
    ref = entry.build(size, seed=1).cuda()
    new = entry.build(size, cls_name="ModelNew", seed=1).cuda()
    (x,) = entry.inputs(size, batch=batch, generator=_gen(batch), device="cuda")
    with precision("fp32"), torch.no_grad():
        got = new(x)
        want = copy.deepcopy(ref).double()(x.double())
    assert got.shape == want.shape and not torch.isnan(got).any()
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key", KEYS)
def test_model_compile_and_export_on_cuda(key):
    entry = get_entry(key)
    new = entry.build("small", cls_name="ModelNew", seed=2).cuda()
    ref = entry.build("small", seed=2).cuda()
    (x,) = entry.inputs("small", batch=5, generator=_gen(5), device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(new, fullgraph=True)
    ep = torch.export.export(new, (x,))
    with precision("fp32"), torch.no_grad():
        want = ref(x)
        torch.testing.assert_close(compiled(x), want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ep.module()(x), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p", ["tf32", "fp32"])
def test_model4_one_op_path_compiles_and_exports(p):
    """Model 4 with channels the wgmma kernel takes: torch.compile(fullgraph=True) and torch.export keep the one-op
    path (the planner's answer is a traced constant, not a graph break) and give eager ModelNew's output."""
    from fusedops.models import convtranspose2d_gelu_groupnorm as model4

    entry = get_entry("4")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the one-op path runs the wgmma kernel, which is built for sm_90 only")
    new = entry.build("bench", cls_name="ModelNew", seed=3).cuda()
    x = torch.rand(2, 64, 21, 30, generator=_gen(3)).cuda()
    with precision(p), torch.no_grad():
        model4._WGMMA_RUNS.clear()
        eager = new(x)
        assert list(model4._WGMMA_RUNS.values()) == [True], model4._WGMMA_RUNS
        torch._dynamo.reset()
        compiled = torch.compile(new, fullgraph=True)(x)
        exported = torch.export.export(new, (x,)).module()(x)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    torch.testing.assert_close(exported, eager, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------------------------
# The low-latency path: CUDA graphs at the reference size, torch.compile(reduce-overhead), concurrency, plan choice
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", KEYS)
def test_model_graph_capture_at_bench_size_matches_eager_runs(key):
    """torch.cuda.graphs capture of ModelNew at the reference shape (batch 16 for model 4: its reference batch is
    2 GB): replays on fresh inputs give what plain runs of ModelNew give, bit for bit."""
    entry = get_entry(key)
    new = entry.build("bench", cls_name="ModelNew", seed=11).cuda()
    batch = 16 if entry.number == 4 else None
    (x,) = entry.inputs("bench", batch=batch, generator=_gen(11), device="cuda")
    static_x = x.clone()
    with precision("tf32"), torch.inference_mode():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            new(static_x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = new(static_x)
        for seed in (12, 13):
            (x2,) = entry.inputs("bench", batch=batch, generator=_gen(seed), device="cuda")
            static_x.copy_(x2)
            static_y.fill_(float("nan"))
            graph.replay()
            torch.testing.assert_close(static_y, new(x2), rtol=0, atol=0)


@pytest.mark.parametrize("key", KEYS)
def test_model_compiled_reduce_overhead_matches_eager(key):
    """torch.compile(mode="reduce-overhead") over ModelNew (Inductor with CUDA graphs around the custom op)."""
    entry = get_entry(key)
    new = entry.build("small", cls_name="ModelNew", seed=14).cuda()
    ref = entry.build("small", seed=14).cuda()
    torch._dynamo.reset()
    compiled = torch.compile(new, mode="reduce-overhead", fullgraph=True)
    with precision("fp32"), torch.inference_mode():
        for seed in (15, 16, 17, 18):  # several calls: the graph is recorded, then replayed
            (x,) = entry.inputs("small", batch=6, generator=_gen(seed), device="cuda")
            got = compiled(x).clone()
            torch.testing.assert_close(got, ref(x), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()


def test_one_plan_from_two_threads_on_two_streams():
    """The cached plan is shared by concurrent calls: two threads, each on its own stream, many calls each."""
    g = _gen(20)
    x = [torch.rand(64, 512, generator=g).cuda() for _ in range(2)]
    w = (torch.randn(1024, 512, generator=g) / 22).cuda()
    b, gm, bt = _params(1024, 0, seed=21)[0], *_params(1024, 0, seed=22)[:2]
    with precision("fp32"):
        want = [F.leaky_relu(F.group_norm(F.linear(xi, w, b), 64, gm, bt, 1e-5), 0.01) * 2 for xi in x]
    outs = [[], []]

    def worker(i):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s), precision("fp32"):
            for _ in range(50):
                outs[i].append(torch_ops.gemm_group_norm_act(x[i], w, b, gm, bt, [], 64, 1e-5, "",
                                                             "leaky_relu(0.01);mul(2)"))
        s.synchronize()

    run_in_threads(worker, 2)
    for i in range(2):
        for y in outs[i]:
            torch.testing.assert_close(y, want[i], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key", KEYS)
def test_planner_picks_the_measured_kernels(key):
    """What each ModelNew's op runs at the reference shape (docs/kernels.md explains the choices)."""
    entry = get_entry(key)
    new = entry.build("bench", cls_name="ModelNew", seed=23).cuda()
    batch = 4 if entry.number == 4 else None
    (x,) = entry.inputs("bench", batch=batch, generator=_gen(23), device="cuda")
    if entry.number == 4:
        gn = new.group_norm
        y = new.conv_transpose(x)
        text = torch_ops.plan_kernels(y, gn.weight, gn.bias, [], gn.num_groups, gn.eps, "gelu")
        assert text.startswith("gn_onepass(vec4,pre=gelu_fast"), text
        return
    lin = next(m for m in new.modules() if isinstance(m, torch.nn.Linear))
    gn = next(m for m in new.modules() if isinstance(m, torch.nn.GroupNorm))
    with precision("tf32"):
        text = torch_ops.plan_kernels(x, gn.weight, gn.bias, [], gn.num_groups, gn.eps, w=lin.weight, b=lin.bias)
    assert text.startswith("cublaslt(bias epilogue,tf32) + gn_row_tile"), text
