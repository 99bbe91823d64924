"""`fusedops serve --server pytriton`, the earlier path (PyTriton's proxy: the stub forwards each batch to the serving
process over ZeroMQ), kept for TensorRT engines and as the sweep's comparison: one server, the same model 1 on ORT CPU
with libfusedops_ort.so, checked against float64 eager PyTorch; a bad request; SIGTERM exits 0. The full set of
request, batching and drain tests runs on the default path (test_serve.py); both paths share the inference function
(``server.make_infer``)."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
import zlib

import numpy as np
import pytest
import torch

pytest.importorskip("pytriton", reason="PyTriton (the serve extra) is not installed: pip install -e '.[serve]'")
pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] (the serve extra) is not installed")

from fusedops import ort as fo_ort  # noqa: E402
from fusedops.api import export  # noqa: E402
from fusedops.models.registry import get_entry  # noqa: E402
from fusedops.serve.process import start_server  # noqa: E402
from serve_support import TIMEOUT_S, grpc_infer as _grpc_infer  # noqa: E402

ATOL = RTOL = 1e-4

pytestmark = pytest.mark.skipif(fo_ort.unavailable_reason() is not None,
                                reason=f"libfusedops_ort.so not built: {fo_ort.unavailable_reason()}")


def test_pytriton_path_serves_correctly_and_stops_cleanly(tmp_path):
    onnx_path = export("1", str(tmp_path / "model1.onnx"))
    srv = start_server(str(onnx_path), tmp_path / "srv", "--server", "pytriton", "--max-batch-size", "32")
    try:
        assert "on ort-cpu (cpu) via pytriton" in srv.ready_line
        model = get_entry("1").build("small").double()
        for batch in (1, 17):
            x = np.random.default_rng(zlib.crc32(f"pytriton-{batch}".encode())).random((batch, 96), dtype=np.float32)
            with torch.no_grad():
                expected = model(torch.from_numpy(x).double()).numpy()
            np.testing.assert_allclose(_grpc_infer(srv, x), expected, atol=ATOL, rtol=RTOL)
        body = json.dumps({"inputs": [{"name": "input", "shape": [2, 95], "datatype": "FP32",
                                       "data": [0.5] * 190}]}).encode()
        req = urllib.request.Request(f"http://{srv.http_url}/v2/models/fusedops/infer", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(req, timeout=TIMEOUT_S)
        assert bad.value.code == 400 and "shape" in json.loads(bad.value.read())["error"]
        assert _grpc_infer(srv, np.full((1, 96), 0.25, np.float32)).shape == (1, 160)  # still serving
    finally:
        rc = srv.stop(signal.SIGTERM)
    assert rc == 0, srv.log()[-2000:]
    assert "SIGTERM: draining" in srv.log()
