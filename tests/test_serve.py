"""`fusedops serve` for real: its default server (PyTriton's bundled tritonserver, the model in the Python-backend
stub) in a subprocess on free loopback ports serving the fused model 1 on ONNX Runtime CPU with libfusedops_ort.so,
real tritonclient clients over HTTP and gRPC. PyTriton's own path (``--server pytriton``): test_serve_pytriton.py.

Every check compares with eager PyTorch in float64. Servers are always torn down (SIGTERM, then the process group is
killed if it does not exit); every client call has a timeout.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("pytriton", reason="PyTriton (the serve extra) is not installed: pip install -e '.[serve]'")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] (the serve extra) is not installed")
httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] (the serve extra) is not installed")

from fusedops import ort as fo_ort  # noqa: E402
from fusedops.api import export  # noqa: E402
from fusedops.serve.loadtest import LoadOptions, run_loadtest  # noqa: E402
from fusedops.serve.process import free_loopback_ports, start_server  # noqa: E402
from fusedops.serve import server as server_module  # noqa: E402
from fusedops.serve.server import TEST_DELAY_ENV, ServeOptions, resolve_instances, resolve_server  # noqa: E402
from serve_support import TIMEOUT_S, grpc_infer as _grpc_infer, http_infer as _http_infer  # noqa: E402
from serve_support import eager_float64, fresh, native_unavailable  # noqa: E402

ATOL = RTOL = 1e-4  # float32 on the CPU against float64

pytestmark = pytest.mark.skipif(fo_ort.unavailable_reason() is not None,
                                reason=f"libfusedops_ort.so not built: {fo_ort.unavailable_reason()}")


@pytest.fixture(scope="module")
def model1_onnx(tmp_path_factory):
    return export("1", str(tmp_path_factory.mktemp("serve") / "model1.onnx"))


# Both tritonserver paths: the model in the Python backend's stub, and fusedops' C++ backend (--server native, the
# default for ONNX where built; plugins/triton; its own refusals and drain: test_serve_native.py).
@pytest.fixture(scope="module", params=["tritonserver", "native"])
def server(model1_onnx, tmp_path_factory, request):
    if request.param == "native" and native_unavailable():
        pytest.skip(native_unavailable())
    srv = start_server(str(model1_onnx), tmp_path_factory.mktemp("server"), "--max-batch-size", "32",
                       "--max-queue-delay-us", "500", "--server", request.param)
    srv.kind = request.param
    yield srv
    srv.stop()


def test_ready_and_metadata(server):
    assert "on ort-cpu (cpu) via tritonserver" in server.ready_line
    assert ("native fusedops backend" in server.ready_line) == (server.kind == "native"), server.ready_line
    assert "1 model instance(s)" in server.ready_line, server.ready_line  # CPU sessions: one by default
    with httpclient.InferenceServerClient(server.http_url, network_timeout=TIMEOUT_S) as c:
        assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("fusedops")
        md = c.get_model_metadata("fusedops")
        cfg = c.get_model_config("fusedops")
    assert md["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 96]}]
    assert md["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 160]}]
    assert cfg["max_batch_size"] == 32
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 500
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        assert c.is_server_ready(client_timeout=TIMEOUT_S)
        gmd = c.get_model_metadata("fusedops", as_json=True, client_timeout=TIMEOUT_S)
    assert [i["name"] for i in gmd["inputs"]] == ["input"] and [o["name"] for o in gmd["outputs"]] == ["output"]


@pytest.mark.parametrize("batch", [1, 17])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_outputs_equal_eager_pytorch(server, batch, protocol):
    x = fresh((batch, 96), f"serve-{protocol}-{batch}")
    y = (_http_infer if protocol == "http" else _grpc_infer)(server, x)
    assert y.shape == (batch, 160) and y.dtype == np.float32
    np.testing.assert_allclose(y, eager_float64("1", x), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("protocol,batches,seconds", [("grpc", [1, 3], 3.0), ("http", [2], 2.0)])
def test_eight_concurrent_clients_nothing_lost_nothing_wrong(server, protocol, batches, seconds):
    url = server.grpc_url if protocol == "grpc" else server.http_url
    result = run_loadtest(LoadOptions(url=url, reference="1", protocol=protocol, concurrency=[8], batch=batches,
                                      duration_s=seconds, timeout_s=TIMEOUT_S, tolerance="fp32"))
    for p in result["points"]:
        assert p["ok"] > 8 and p["wrong"] == 0 and p["errors"] == 0 and p["lost"] == 0, p
        assert p["requests"] == p["ok"]
    assert result["ok"]


def test_load_spread_over_client_processes(server, capsys):
    """--processes 2: two spawned client processes share each point; their tallies merge, every response checked.
    Each finished point is also logged on stderr at once (a run cut off by an outer limit still shows it)."""
    result = run_loadtest(LoadOptions(url=server.grpc_url, reference="1", concurrency=[1, 4], duration_s=1.0,
                                      timeout_s=TIMEOUT_S, tolerance="fp32", processes=2))
    for p in result["points"]:
        assert p["ok"] > 4 and p["wrong"] == p["errors"] == p["lost"] == 0, p
        assert len({p["p50_ms"], p["p99_ms"]}) == 2 and p["throughput_inf_s"] > 0
    assert result["ok"]
    err = capsys.readouterr().err
    for p in result["points"]:
        assert f"loadtest: batch 1 concurrency {p['concurrency']}: p50 {p['p50_ms']:.3f}" in err, err


def _post(srv, body: bytes, path: str = "/v2/models/fusedops/infer") -> tuple[int, str]:
    req = urllib.request.Request(f"http://{srv.http_url}{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _request(shape, datatype="FP32", name="input", data=None) -> bytes:
    n = int(np.prod(shape))
    return json.dumps({"inputs": [{"name": name, "shape": list(shape), "datatype": datatype,
                                   "data": data if data is not None else [0.5] * n}]}).encode()


BAD_REQUESTS = {
    # name: (body, words the error must contain)
    "wrong_shape": (_request((2, 95)), "shape"),
    "wrong_dtype": (_request((2, 96), "FP64"), "FP64"),
    "missing_input": (json.dumps({"inputs": []}).encode(), "input"),
    "unknown_input": (_request((2, 96), name="x"), "x"),
    "huge_batch": (_request((4096, 96), data=[0.5]), "batch"),
    "malformed_json": (b'{"inputs": [{"name": "input", "shape": [1, 96', "JSON"),
    "data_count_mismatch": (_request((2, 96), data=[0.5] * 5), "shape does not match"),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_bad_request_gets_a_clear_error_and_the_server_keeps_serving(server, name):
    body, words = BAD_REQUESTS[name]
    if name == "huge_batch":  # 4096 rows of 0.5: build the full data list here, not at import
        body = _request((4096, 96), data=[0.5] * 4096 * 96)
    status, text = _post(server, body)
    # Triton answers 400 for requests that do not fit the model, 500 for a body it cannot parse (not JSON, or data
    # that does not match its own shape)
    assert status == (500 if name in ("malformed_json", "data_count_mismatch") else 400), (status, text)
    error = json.loads(text)["error"]
    assert words.lower() in error.lower(), error
    x = fresh((2, 96), f"after-{name}")
    np.testing.assert_allclose(_http_infer(server, x), eager_float64("1", x), atol=ATOL, rtol=RTOL)


def test_grpc_bad_shape_error(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        inp = grpcclient.InferInput("input", [2, 95], "FP32")
        inp.set_data_from_numpy(np.zeros((2, 95), np.float32))
        with pytest.raises(Exception, match="shape"):
            c.infer("fusedops", [inp], client_timeout=TIMEOUT_S)
    x = fresh((1, 96), "after-grpc-bad")
    np.testing.assert_allclose(_grpc_infer(server, x), eager_float64("1", x), atol=ATOL, rtol=RTOL)


# The stub raises in the inference function (PyTriton's stub reports it as 500); the native backend answers the
# request with INVALID_ARG (400). Both name the bound.
@pytest.mark.parametrize("server_kind,refusal_status", [("tritonserver", 500), ("native", 400)])
def test_unbatched_model_is_served_with_full_shapes(tmp_path, server_kind, refusal_status):
    """Model 2's output (1, C, N, 1) does not keep the batch in dim 0: served with max_batch_size 0, one request a
    run, and --max-batch-size bounds the rows of a request (Triton cannot bound a dim of an unbatched model)."""
    if server_kind == "native" and native_unavailable():
        pytest.skip(native_unavailable())
    onnx_path = export("2", str(tmp_path / "model2.onnx"))
    srv = start_server(str(onnx_path), tmp_path / "srv", "--max-batch-size", "8", "--server", server_kind)
    try:
        with httpclient.InferenceServerClient(srv.http_url, network_timeout=TIMEOUT_S) as c:
            assert c.get_model_config("fusedops")["max_batch_size"] == 0
        for rows in (1, 5, 8):
            x = fresh((rows, 96), f"model2-{rows}")
            y = _http_infer(srv, x)
            assert y.shape == (1, 160, rows, 1)
            np.testing.assert_allclose(y, eager_float64("2", x), atol=ATOL, rtol=RTOL)
        status, text = _post(srv, _request((9, 96), data=[0.5] * 9 * 96))  # more rows than --max-batch-size
        assert status == refusal_status and "takes at most 8 (--max-batch-size)" in json.loads(text)["error"], text
        x = fresh((3, 96), "model2-after-refusal")  # still serving
        np.testing.assert_allclose(_http_infer(srv, x), eager_float64("2", x), atol=ATOL, rtol=RTOL)
    finally:
        assert srv.stop(signal.SIGINT) == 0, srv.log()[-2000:]  # SIGINT stops as cleanly as SIGTERM
    assert "SIGINT: draining" in srv.log()


def test_sigterm_drains_in_flight_requests_and_exits_0(model1_onnx, tmp_path):
    # --exit-timeout 30: the drain (at most 4 held batches of 1.5 s) stays well inside it on a loaded machine. The
    # stub: its inference function holds each batch (TEST_DELAY_ENV); the native backend's drain under load is
    # test_serve_native.py's.
    srv = start_server(str(model1_onnx), tmp_path / "srv", "--max-queue-delay-us", "0", "--exit-timeout", "30",
                       "--server", "tritonserver", env={TEST_DELAY_ENV: "1500"})
    inputs = [fresh((2, 96), f"drain-{k}") for k in range(4)]
    results: dict[int, object] = {}

    def client(k):
        try:
            results[k] = _grpc_infer(srv, inputs[k])
        except Exception as e:  # recorded, asserted below
            results[k] = e

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.2)  # all four sent (the first batch is being held 1.5 s, the rest queue behind it)
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(TIMEOUT_S)
        rc = srv.proc.wait(timeout=60)
    finally:
        srv.stop()
    for k in range(4):
        assert isinstance(results.get(k), np.ndarray), f"request {k} was not answered: {results.get(k)!r}"
        np.testing.assert_allclose(results[k], eager_float64("1", inputs[k]), atol=ATOL, rtol=RTOL)
    assert rc == 0, srv.log()[-2000:]
    assert "SIGTERM: draining" in srv.log()


# ---- errors before any server starts (the CLI's main in this process: one line on stderr, exit 2) -----------------

def _cli(capsys, *args) -> tuple[int, str]:
    from fusedops.cli import main

    rc = main(list(args))
    return rc, capsys.readouterr().err


def test_serve_missing_model_is_one_error_line(tmp_path, capsys):
    rc, err = _cli(capsys, "serve", str(tmp_path / "missing.onnx"))
    assert rc == 2
    assert err.strip().splitlines() == [f"fusedops: error: ONNX model {str(tmp_path / 'missing.onnx')!r} not found"]


def test_serve_port_in_use_is_named(model1_onnx, capsys):
    import socket

    (port,) = free_loopback_ports(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        rc, err = _cli(capsys, "serve", str(model1_onnx), "--http-port", str(port))
    assert rc == 2 and f"http port {port} on 127.0.0.1 is not free" in err, err


def test_port_with_connections_in_time_wait_counts_as_free():
    """A server restarted on its port: the last one's closed connections (TIME_WAIT) do not block the bind."""
    import socket

    from fusedops.serve.server import check_port_free

    (port,) = free_loopback_ports(1)
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        conn.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
        client.close()
    check_port_free("127.0.0.1", port, "http")  # raises if the port were reported busy


@pytest.mark.parametrize("built", [True, False])
def test_server_auto_is_native_for_onnx_on_ort_where_built(monkeypatch, built):
    monkeypatch.setattr(server_module, "backend_built", lambda: built)
    onnx_server = "native" if built else "tritonserver"
    assert resolve_server(ServeOptions(source="m.onnx")) == onnx_server
    assert resolve_server(ServeOptions(source="m.ONNX", backend="ort-cuda")) == onnx_server
    assert resolve_server(ServeOptions(source="m.onnx", backend="ort-cpu")) == onnx_server
    assert resolve_server(ServeOptions(source="1")) == "tritonserver"  # a model key: PyTorch or an export in the stub
    assert resolve_server(ServeOptions(source="m.onnx", backend="torch-cuda")) == "tritonserver"
    assert resolve_server(ServeOptions(source="m.plan")) == "pytriton"
    assert resolve_server(ServeOptions(source="m.ENGINE")) == "pytriton"
    assert resolve_server(ServeOptions(source="m.plan", server="tritonserver")) == "tritonserver"
    assert resolve_server(ServeOptions(source="m.onnx", server="tritonserver")) == "tritonserver"


def test_default_instances_are_two_native_cuda_sessions_else_one():
    assert resolve_instances(ServeOptions(source="m.onnx"), "native", "ort-cuda") == 2
    assert resolve_instances(ServeOptions(source="m.onnx"), "native", "ort-cpu") == 1
    assert resolve_instances(ServeOptions(source="m.onnx"), "tritonserver", "ort-cuda") == 1
    assert resolve_instances(ServeOptions(source="m.onnx", instances=3), "native", "ort-cuda") == 3
    assert resolve_instances(ServeOptions(source="m.onnx", instances=1), "native", "ort-cuda") == 1


def test_serve_unavailable_backend_says_why(model1_onnx, capsys):
    rc, err = _cli(capsys, "serve", str(model1_onnx), "--backend", "trt")
    assert rc == 2 and "backend trt cannot serve" in err and "TensorRT engine" in err


@pytest.mark.parametrize("url", ["10.1.2.3:8001", "example.com:8001", "192.168.0.1:8000"])
def test_loadtest_refuses_non_loopback_targets(url, capsys):
    rc, err = _cli(capsys, "loadtest", url, "--reference", "1", "--duration", "1")
    assert rc == 2 and "not a loopback address" in err, err


def test_loadtest_against_no_server_is_an_error(capsys):
    (port,) = free_loopback_ports(1)
    rc, err = _cli(capsys, "loadtest", f"127.0.0.1:{port}", "--reference", "1", "--duration", "1", "--timeout", "5")
    assert rc == 2 and "cannot read model 'fusedops'" in err, err
