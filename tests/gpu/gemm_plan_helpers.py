"""Shared by the GPU tests of GemmGroupNormAct plans: fresh random inputs, one call through a fresh plan of the C ABI
(with NaN-poisoned outputs and a 0xFF-poisoned workspace), and the float64 / eager references."""

from __future__ import annotations

import math

import torch

from fusedops import catalog
from fusedops.plugins import abi
from kernel_support import DEV, ULP16  # noqa: F401 - re-exported for the GEMM plan tests

GEMM = catalog.GEMM_GROUP_NORM_ACT.name


def attrs(**kw) -> catalog.FusedAttrs:
    return catalog.parse_attrs(GEMM, kw)


def inputs(M, K, C, seed, dtype=torch.float32, n_extra=1, pdtype=torch.float32, x_scale=1.0, x_shift=0.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(M, K, generator=g) * x_scale + x_shift
    w = torch.randn(C, K, generator=g) / math.sqrt(K)
    b = torch.randn(C, generator=g) * 0.5
    gamma = torch.rand(C, generator=g) + 0.5
    beta = torch.randn(C, generator=g) * 0.5
    extras = [torch.randn(C, generator=g) for _ in range(n_extra)]
    return (x.to(DEV, dtype), w.to(DEV, dtype), b.to(DEV, pdtype), gamma.to(DEV, pdtype), beta.to(DEV, pdtype),
            [e.to(DEV, pdtype) for e in extras])


def plan_for(tensors, a, options=None):
    descs = [abi.tensor_desc(t.dtype, tuple(t.shape)) if t is not None else abi.tensor_desc(None, None)
             for t in tensors]
    d, shape = abi.describe(abi.parse_attributes(GEMM, a), descs)
    return abi.Plan(d, tensors[0].device.index, options), shape


def run(x, w, b, gamma, beta, extras, a, options=None):
    """One call through a fresh plan; returns (Y, the plan's kernels text)."""
    tensors = [x, w, b, gamma, beta, *extras]
    plan, shape = plan_for(tensors, a, options)
    y = torch.full(shape, float("nan"), dtype=x.dtype, device=DEV)
    ws = torch.full((max(plan.workspace, 1),), 0xFF, dtype=torch.uint8, device=DEV)
    plan.run([t.data_ptr() if t is not None else None for t in tensors], y.data_ptr(), ws.data_ptr(), plan.workspace,
             torch.cuda.current_stream().cuda_stream)
    return y, plan.kernels


def ref(x, w, b, gamma, beta, extras, a):
    d = lambda t: t.detach().cpu().double() if t is not None else None  # noqa: E731
    return catalog.gemm_group_norm_act_reference(d(x), d(w), d(b), d(gamma), d(beta), [d(e) for e in extras], a)


def eager(x, w, b, gamma, beta, extras, a):
    """The catalog's reference in X's dtype on the GPU (eager PyTorch: cuBLAS, then the chain / GroupNorm ops)."""
    cast = lambda t: t.to(x.dtype) if t is not None else None  # noqa: E731
    return catalog.gemm_group_norm_act_reference(x, w, cast(b), cast(gamma), cast(beta), [cast(e) for e in extras],
                                                 a)


def max_err(got, want) -> float:
    return (got.detach().cpu().double() - want).abs().max().item()


def check_graph_replay(tensors, a, options, new_x_seed, tol):
    """One plan run directly, then captured in a CUDA graph: a replay on the same inputs gives identical bits, and a
    replay after X is refilled (fresh random values) matches float64 within `tol`."""
    plan, shape = plan_for(tensors, a, options)
    ws = torch.empty(max(plan.workspace, 1), dtype=torch.uint8, device=DEV)
    y = torch.full(shape, float("nan"), dtype=tensors[0].dtype, device=DEV)
    ptrs = [t.data_ptr() for t in tensors]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        plan.run(ptrs, y.data_ptr(), ws.data_ptr(), plan.workspace, stream.cuda_stream)
    stream.synchronize()
    direct = y.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        plan.run(ptrs, y.data_ptr(), ws.data_ptr(), plan.workspace, stream.cuda_stream)
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, direct), "a replay differs from the direct run on the same inputs"
    x = tensors[0]
    x.copy_(torch.rand(x.shape, generator=torch.Generator().manual_seed(new_x_seed)).to(DEV, x.dtype))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y.cpu().double(), ref(*tensors[:5], list(tensors[5:]), a), rtol=tol, atol=tol)


def check_without_bias(M, K, C, groups, seed, options, tol, make_inputs=inputs):
    """A plan with no bias input (the ONNX Gemm without C): the kernel adds none."""
    x, w, _, gamma, beta, extras = make_inputs(M, K, C, seed)
    a = attrs(num_groups=groups, post="silu")
    got, _ = run(x, w, None, gamma, beta, extras, a, options)
    want = ref(x, w, torch.zeros(C), gamma, beta, extras, a)
    torch.testing.assert_close(got.cpu().double(), want, rtol=tol, atol=tol)
