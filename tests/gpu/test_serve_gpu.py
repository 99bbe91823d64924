"""`fusedops serve` on the GPU: a real server on loopback for each GPU backend (ORT CUDA EP + library, PyTorch CUDA
ops through ModelNew, eager PyTorch, TensorRT engine) on the default path (the model in tritonserver's Python-backend
stub), for the fused backends on PyTriton's (a TensorRT engine: PyTriton's only), and ORT's CUDA EP in fusedops'
native Triton backend (--server native); outputs against float64 eager PyTorch at the TF32 tolerance,
and 8 concurrent clients with every response checked. Skips with the reason where a piece is missing.
The timed sweep is `python -m fusedops.serve.sweep` (tools/gpu/device_serve.sh)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu

pytest.importorskip("pytriton", reason="PyTriton (the serve extra) is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient (the serve extra) is not installed")

from fusedops.models.registry import get_entry  # noqa: E402
from fusedops.serve import backends  # noqa: E402
from fusedops.serve.loadtest import LoadOptions, run_loadtest  # noqa: E402
from fusedops.serve.process import start_server  # noqa: E402

ATOL = RTOL = 1e-2  # TF32, the GPU runtimes' default precision
TIMEOUT_S = 60.0

if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to PyTorch", allow_module_level=True)


def _eager(key: str, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return get_entry(key).build("small").double()(torch.from_numpy(x).double()).numpy()


def _infer(srv, x):
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return c.infer(srv.model_name, [inp], client_timeout=TIMEOUT_S).as_numpy("output")


def _require(backend: str, kind: str):
    reason = backends.unavailable_reason(backend, kind)
    if reason:
        pytest.skip(f"{backend} cannot serve here: {reason}")


@pytest.fixture(scope="module")
def model1_onnx(tmp_path_factory):
    from fusedops.api import export

    return export("1", str(tmp_path_factory.mktemp("gpu-serve") / "model1.onnx"))


def _check_server(srv, backend: str):
    assert f"on {backend} (cuda)" in srv.ready_line, srv.ready_line
    for batch in (1, 33):
        x = np.random.default_rng(zlib.crc32(f"{backend}-{batch}".encode())).random((batch, 96), dtype=np.float32)
        np.testing.assert_allclose(_infer(srv, x), _eager("1", x), atol=ATOL, rtol=RTOL)
    r = run_loadtest(LoadOptions(url=srv.grpc_url, reference="1", concurrency=[8], batch=[1, 4], duration_s=3.0,
                                 timeout_s=TIMEOUT_S, tolerance="tf32"))
    assert r["ok"], [p["first_problems"] for p in r["points"]]


@pytest.mark.parametrize("backend,server", [("ort-cuda", "tritonserver"), ("torch-cuda", "tritonserver"),
                                            ("torch-eager", "tritonserver"), ("ort-cuda", "pytriton"),
                                            ("torch-cuda", "pytriton"), ("ort-cuda", "native")])
def test_gpu_backend_serves_correctly(model1_onnx, tmp_path, backend, server):
    kind = "onnx" if backend == "ort-cuda" else "model"
    _require(backend, kind)
    srv = start_server(str(model1_onnx) if kind == "onnx" else "1", tmp_path, "--backend", backend,
                       "--server", server)
    try:
        # (native: "via tritonserver (native fusedops backend)", KIND_GPU instances on the CUDA EP)
        assert f"via {'tritonserver (native' if server == 'native' else server}" in srv.ready_line, srv.ready_line
        _check_server(srv, backend)
    finally:
        assert srv.stop() == 0, srv.log()[-2000:]


def test_auto_prefers_the_cuda_ep_for_onnx(model1_onnx):
    _require("ort-cuda", "onnx")
    assert backends.choose_backend(str(model1_onnx)) == ("ort-cuda", "onnx")


def test_tensorrt_engine_is_served(model1_onnx, tmp_path):
    from fusedops.workflows.verify import _trt_available

    reason = _trt_available()
    if reason:
        pytest.skip(f"TensorRT engine serving needs TensorRT's builder and runtime: {reason}")
    from fusedops.trt_build import builder

    engine = tmp_path / "model1.plan"
    builder.build_engine(str(model1_onnx), str(engine), precision="tf32", min_batch=1, opt_batch=8, max_batch=64,
                         progress=False)
    assert backends.choose_backend(str(engine)) == ("trt", "engine")
    srv = start_server(str(engine), tmp_path / "srv")
    try:
        assert "via pytriton" in srv.ready_line, srv.ready_line  # --server auto: an engine goes through PyTriton
        _check_server(srv, "trt")
    finally:
        assert srv.stop() == 0, srv.log()[-2000:]
