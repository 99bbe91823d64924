"""End to end with TensorRT: fused ONNX → engine (our plugin library loaded into the builder) → run → eager PyTorch.

Needs the TensorRT Python package with its builder, a CUDA device, pycuda and libfusedops_trt.so; each missing piece
skips with the reason. (No machine this project has had so far offers the TensorRT builder: see docs/tensorrt.md.)
"""

from __future__ import annotations

import importlib

import pytest

from fusedops.models import REGISTRY

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def trt():
    try:
        return importlib.import_module("tensorrt")
    except Exception as e:
        pytest.skip(f"import tensorrt failed ({type(e).__name__}: {e}); engine tests need TensorRT's builder")


@pytest.fixture(scope="module")
def plugin(trt):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    try:
        importlib.import_module("pycuda.driver")
    except Exception as e:
        pytest.skip(f"pycuda not usable ({e})")
    from fusedops.errors import FusedopsError
    from trt_harness import driver as harness

    try:
        b = harness.build_harness()
    except FusedopsError as e:
        pytest.skip(f"plugin library not buildable here: {e}")
    if not b.real_kernels:
        pytest.skip("the CUDA kernels were not built; libfusedops_trt.so is missing")
    return b.plugin


@pytest.mark.parametrize("key", list(REGISTRY))
def test_fused_engine_matches_eager(tmp_path, plugin, key):
    from fusedops import api
    from fusedops.trt_build import builder, runtime

    onnx_path = api.export(key, tmp_path / f"{key}.onnx", size="small")
    res = builder.build_engine(onnx_path, tmp_path / f"{key}.plan", precision="tf32", min_batch=1, opt_batch=12,
                               max_batch=64, workspace_mb=1024, plugin_library=plugin, progress=False,
                               cache_dir=tmp_path / "cache", timing_cache=tmp_path / "timing.cache")
    assert res.engine_path.is_file() and not res.cached
    again = builder.build_engine(onnx_path, tmp_path / f"{key}-2.plan", precision="tf32", min_batch=1, opt_batch=12,
                                 max_batch=64, workspace_mb=1024, plugin_library=plugin, progress=False,
                                 cache_dir=tmp_path / "cache")
    assert again.cached and again.cache_key == res.cache_key
    eng = runtime.Engine.load(res.engine_path)
    for batch in (1, 12, 37):
        report = runtime.verify(eng, key, size="small", batch=batch)
        assert report["ok"], report


def test_cuda_graph_replay_matches(tmp_path, plugin):
    import numpy as np
    import torch

    from fusedops import api
    from fusedops.models import get_entry
    from fusedops.trt_build import builder, runtime

    key = "matmul_groupnorm_leakyrelu_sum"
    onnx_path = api.export(key, tmp_path / "m.onnx", size="small")
    res = builder.build_engine(onnx_path, tmp_path / "m.plan", max_batch=16, plugin_library=plugin, progress=False)
    eng = runtime.Engine.load(res.engine_path)
    x = get_entry(key).inputs("small", batch=16, device="cuda")[0]
    graph, outs = eng.capture_graph({eng.input_names[0]: x})
    first = runtime.to_numpy(outs[eng.output_names[0]]).copy()
    x.copy_(torch.rand_like(x))  # new data in the captured input buffer
    graph.replay(eng.stream.handle)
    eng.synchronize()
    second = runtime.to_numpy(outs[eng.output_names[0]])
    with torch.no_grad():
        ref = get_entry(key).build("small").cuda()(x).cpu().numpy()
    assert not np.allclose(first, second)
    np.testing.assert_allclose(second, ref, rtol=1e-2, atol=1e-2)
