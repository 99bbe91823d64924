"""GemmGroupNormAct plans replay a CUDA graph of their launches per pointer set (plugins/csrc/cuda/replay_cache.h,
issue 8): every call must still compute from the buffers it is given. Each case runs one plan many times over two
alternating sets of input, output and workspace buffers with fresh values (outputs NaN-poisoned before each call) and
compares every result bit for bit with a plan that launches directly (PlanOptions.direct_launches)."""

from __future__ import annotations

import pytest
import torch

from kernel_support import DEV, SKIP_REASON, run_in_threads

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]

if SKIP_REASON is None:
    from fusedops.plugins import abi
    from gemm_plan_helpers import attrs, inputs, plan_for


class Buffers:
    """One pointer set of a call: inputs, a NaN-poisoned output and a 0xFF-poisoned workspace."""

    def __init__(self, M, K, C, seed, dtype, shape, workspace):
        self.x, self.w, self.b, self.gamma, self.beta, self.extras = inputs(M, K, C, seed, dtype)
        self.y = torch.empty(shape, dtype=dtype, device=DEV)
        self.ws = torch.empty(max(workspace, 1), dtype=torch.uint8, device=DEV)

    def tensors(self):
        return [self.x, self.w, self.b, self.gamma, self.beta, *self.extras]

    def copy_inputs_from(self, other):
        for mine, theirs in zip(self.tensors(), other.tensors()):
            mine.copy_(theirs)
        self.y.fill_(float("nan"))

    def refill(self, seed):
        g = torch.Generator(device=DEV).manual_seed(seed)
        self.x.copy_(torch.rand(self.x.shape, generator=g, device=DEV))
        self.y.fill_(float("nan"))
        self.ws.fill_(0xFF)

    def run(self, plan, stream):
        plan.run([t.data_ptr() for t in self.tensors()], self.y.data_ptr(), self.ws.data_ptr(), plan.workspace,
                 stream.cuda_stream)


CASES = {  # M, K, C, dtype: the cuBLASLt path (float32 and bfloat16) and the skinny kernel (M <= 16)
    "cublaslt_tf32": (256, 512, 256, torch.float32),
    "cublaslt_bf16": (128, 256, 512, torch.bfloat16),
    "skinny": (4, 1024, 256, torch.float32),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_replayed_calls_equal_direct_launches_call_for_call(name):
    M, K, C, dtype = CASES[name]
    a = attrs(num_groups=8, pre="add(@0);gelu", post="silu")
    probe = Buffers(M, K, C, 0, dtype, (1,), 0)
    replayed, shape = plan_for(probe.tensors(), a)
    direct, _ = plan_for(probe.tensors(), a, abi.PlanOptions(direct_launches=True))
    sets = [Buffers(M, K, C, s, dtype, shape, replayed.workspace) for s in (1, 2)]
    check = Buffers(M, K, C, 3, dtype, shape, direct.workspace)
    stream = torch.cuda.current_stream()
    for call in range(8):  # a set's first call runs directly, its second is captured, then replays
        bufs = sets[call % 2]
        bufs.refill(100 + call)
        bufs.run(replayed, stream)
        check.copy_inputs_from(bufs)
        check.run(direct, stream)
        torch.cuda.synchronize()
        assert not torch.isnan(bufs.y).any(), f"call {call}: the output was not written"
        assert torch.equal(bufs.y, check.y), f"call {call}: replay differs from a direct launch"


def test_calls_inside_a_caller_captured_graph_are_recorded_not_replayed():
    """A plan called while the caller captures a CUDA graph (torch.cuda.graph, reduce-overhead) must put its own
    launches into that graph: the replayed graph must then follow the buffers' new values."""
    M, K, C, dtype = CASES["cublaslt_tf32"]
    a = attrs(num_groups=8, post="relu")
    bufs = Buffers(M, K, C, 4, dtype, (1,), 0)
    plan, shape = plan_for(bufs.tensors(), a)
    bufs = Buffers(M, K, C, 4, dtype, shape, plan.workspace)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    for _ in range(3):  # warm: the plan's own cache has captured this pointer set
        bufs.run(plan, side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        bufs.run(plan, side)
    direct, _ = plan_for(bufs.tensors(), a, abi.PlanOptions(direct_launches=True))
    check = Buffers(M, K, C, 5, dtype, shape, direct.workspace)
    for seed in (6, 7):
        bufs.refill(seed)
        graph.replay()
        check.copy_inputs_from(bufs)
        check.run(direct, torch.cuda.current_stream())
        torch.cuda.synchronize()
        assert torch.equal(bufs.y, check.y)


def test_two_threads_on_one_plan_each_get_their_own_result():
    M, K, C, dtype = CASES["cublaslt_tf32"]
    a = attrs(num_groups=4, post="gelu")
    probe = Buffers(M, K, C, 8, dtype, (1,), 0)
    plan, shape = plan_for(probe.tensors(), a)
    direct, _ = plan_for(probe.tensors(), a, abi.PlanOptions(direct_launches=True))
    results = {}

    def worker(tid):
        stream = torch.cuda.Stream()
        bufs = Buffers(M, K, C, 10 + tid, dtype, shape, plan.workspace)
        with torch.cuda.stream(stream):
            for call in range(6):
                bufs.refill(1000 * tid + call)
                bufs.run(plan, stream)
                stream.synchronize()
                check = Buffers(M, K, C, 20 + tid, dtype, shape, direct.workspace)
                check.copy_inputs_from(bufs)
                check.run(direct, stream)
                stream.synchronize()
                results[(tid, call)] = torch.equal(bufs.y, check.y)

    run_in_threads(worker, 2)
    assert len(results) == 12 and all(results.values()), results
