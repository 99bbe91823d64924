"""The serving runner on ORT's CUDA EP (``fusedops.serve.ort_cuda_runner``): buffers bound once per input shape and
ORT's CUDA graph per shape. Each batch of fresh random inputs must give what the plain session gives (same kernels,
so equal to rounding), through the regular first runs, the capture and the replays; a graph must never hand back an
earlier batch's result (it bakes in addresses, not contents); shapes past the cache run without a graph."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch")
    from fusedops import ort as fo

    if fo.unavailable_reason("CUDAExecutionProvider"):
        pytest.skip(fo.unavailable_reason("CUDAExecutionProvider"))
    from fusedops.exporter_api import export

    return export("1", str(tmp_path_factory.mktemp("runner") / "m1.onnx"), size="small")


def _plain(path):
    from fusedops import ort as fo

    return fo.session(path, providers=["CUDAExecutionProvider"])


@pytest.mark.parametrize("use_graph", [True, False])
def test_every_batch_equals_the_plain_session(model_path, use_graph):
    from fusedops.serve.ort_cuda_runner import CudaRunner

    plain = _plain(model_path)
    name, out = plain.get_inputs()[0].name, plain.get_outputs()[0].name
    runner = CudaRunner(model_path, [name], [out], use_graph=use_graph)
    assert runner.uses_graph == use_graph, runner.graph_refused
    rng = np.random.default_rng(11)
    width = plain.get_inputs()[0].shape[1]
    for step in range(6):  # per shape: the first (bound) run, ORT's regular runs, its capture, then replays
        for batch in (1, 3, 8, 3, 1):
            x = rng.standard_normal((batch, width), dtype=np.float32) * 2 + 0.5
            got = runner({name: x})[out]
            want = plain.run([out], {name: x})[0]
            assert got.shape == want.shape and np.isfinite(got).all()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"step {step} batch {batch}")
    assert len(runner._bindings) == 3


def test_past_the_shape_cache_runs_without_a_graph(model_path):
    from fusedops.serve.ort_cuda_runner import CudaRunner

    plain = _plain(model_path)
    name, out = plain.get_inputs()[0].name, plain.get_outputs()[0].name
    runner = CudaRunner(model_path, [name], [out], max_shapes=2)
    width = plain.get_inputs()[0].shape[1]
    rng = np.random.default_rng(12)
    for _ in range(4):
        for batch in (2, 5, 7, 9):
            x = rng.standard_normal((batch, width), dtype=np.float32)
            np.testing.assert_allclose(runner({name: x})[out], plain.run([out], {name: x})[0],
                                       rtol=1e-5, atol=1e-5)
    assert len(runner._bindings) == 2


def test_two_threads_share_one_runner(model_path):
    from fusedops.serve.ort_cuda_runner import CudaRunner

    plain = _plain(model_path)
    name, out = plain.get_inputs()[0].name, plain.get_outputs()[0].name
    runner = CudaRunner(model_path, [name], [out])
    width = plain.get_inputs()[0].shape[1]
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(20):
            x = rng.standard_normal((4, width), dtype=np.float32)
            got, want = runner({name: x})[out], plain.run([out], {name: x})[0]
            if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                failures.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
