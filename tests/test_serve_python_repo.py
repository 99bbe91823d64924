"""The Python-backend model repository (`fusedops repo --backend python`, and what `fusedops serve` runs): the config
parses against Triton's model-config schema and says what the stub loads; model.py is the package's
triton_model.py; and PyTriton's bundled tritonserver serves a repository written by the CLI (the ONNX named relative
to the model folder, fusedops found in this environment as a user's own server would), checked against float64
eager PyTorch."""

from __future__ import annotations

import filecmp
import json
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pytriton", reason="PyTriton (the serve extra, which carries tritonserver) is not installed")
httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient (the serve extra) is not installed")

from fusedops import ort as fo_ort  # noqa: E402
from fusedops.api import export  # noqa: E402
from fusedops.errors import FusedopsError  # noqa: E402
from fusedops.models.registry import get_entry  # noqa: E402
from fusedops.serve import python_repo, tritonserver  # noqa: E402
from fusedops.serve.process import free_loopback_ports  # noqa: E402
from fusedops.serve.repository import RepoOptions, model_config_pb2, parse_config  # noqa: E402
from fusedops.serve.server import ServeOptions  # noqa: E402

pytestmark = pytest.mark.skipif(fo_ort.unavailable_reason() is not None,
                                reason=f"libfusedops_ort.so not built: {fo_ort.unavailable_reason()}")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pyrepo-src")
    return {k: Path(export(k, str(folder / f"model{k}.onnx"))) for k in ("1", "2")}


def _cli(capsys, *args) -> tuple[int, str, str]:
    from fusedops.cli import main

    rc = main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_python_repository_config(exported, tmp_path, capsys):
    rc, out, _ = _cli(capsys, "repo", str(exported["1"]), "--out-dir", str(tmp_path / "repo"), "--backend", "python",
                      "--max-batch-size", "24", "--max-queue-delay-us", "50")
    assert rc == 0 and "fusedops installed" in out, out
    model_dir = tmp_path / "repo" / "fusedops"
    cfg = parse_config((model_dir / "config.pbtxt").read_text())
    pb = model_config_pb2()
    assert cfg.backend == "python" and cfg.platform == ""
    assert cfg.max_batch_size == 24 and cfg.dynamic_batching.max_queue_delay_microseconds == 50
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [("input", pb.TYPE_FP32, [96])]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [("output", pb.TYPE_FP32, [160])]
    assert cfg.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params == {"source": "1/model.onnx", "backend": "ort-cpu", "size": "small", "max_batch_size": "24"}
    assert filecmp.cmp(model_dir / "1" / "model.py", python_repo.MODEL_FILE, shallow=False)
    assert filecmp.cmp(model_dir / "1" / "model.onnx", exported["1"], shallow=False)
    assert json.loads((tmp_path / "repo" / "fusedops_repo.json").read_text())["runtime"] == "ort-cpu"


def test_unbatched_model_and_errors(exported, tmp_path):
    result = python_repo.write_python_repository(RepoOptions(source=str(exported["2"]), out=str(tmp_path / "r")))
    cfg = parse_config(result.config_path.read_text())
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching") and list(cfg.input[0].dims) == [-1, 96]
    with pytest.raises(FusedopsError, match="exists; pass --force"):
        python_repo.write_python_repository(RepoOptions(source=str(exported["2"]), out=str(tmp_path / "r")))
    with pytest.raises(FusedopsError, match="serves a fused .onnx"):
        python_repo.write_python_repository(RepoOptions(source=str(tmp_path / "no.onnx"), out=str(tmp_path / "x")))
    with pytest.raises(FusedopsError, match="--runtime must be"):
        python_repo.write_python_repository(RepoOptions(source=str(exported["1"]), out=str(tmp_path / "x")), "trt")
    with pytest.raises(FusedopsError, match="not 'trt'"):
        python_repo.write_python_model(tmp_path / "y", "m", str(exported["1"]), "trt", "small", [], [])


def test_bundled_tritonserver_serves_the_cli_repository(exported, tmp_path, capsys):
    assert _cli(capsys, "repo", str(exported["1"]), "--out-dir", str(tmp_path / "repo"), "--backend", "python")[0] == 0
    binary, libs, python_backend, stub = tritonserver.bundled_tritonserver()
    backends = tritonserver._backend_folder(tmp_path / "ws", python_backend, stub)
    http_port, grpc_port = free_loopback_ports(2)
    options = ServeOptions(source=str(exported["1"]), http_port=http_port, grpc_port=grpc_port, metrics_port=None,
                           server="tritonserver")
    log = tmp_path / "triton.log"
    proc = subprocess.Popen(tritonserver._command(options, binary, tmp_path / "repo", backends, log, "t0ken1234"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=tritonserver._server_env(libs))
    try:
        deadline = time.monotonic() + 120
        while not tritonserver._model_ready(f"http://127.0.0.1:{http_port}/v2/models/fusedops/ready"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.25)
        x = np.random.default_rng(zlib.crc32(b"pyrepo")).random((5, 96), dtype=np.float32)
        with httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=30) as c:
            inp = httpclient.InferInput("input", [5, 96], "FP32")
            inp.set_data_from_numpy(x)
            y = c.infer("fusedops", [inp]).as_numpy("output")
        with torch.no_grad():
            expected = get_entry("1").build("small").double()(torch.from_numpy(x).double()).numpy()
        np.testing.assert_allclose(y, expected, atol=1e-4, rtol=1e-4)
        # the restricted model-repository API needs the header only the launcher knows
        req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/repository/index", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(req, timeout=10)
        assert denied.value.code in (401, 403)
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]


def test_a_model_the_stub_cannot_load_is_one_clear_error(exported, tmp_path, monkeypatch):
    """tritonserver exits when the stub's initialize raises; `fusedops serve` reports Triton's last error line and
    leaves no server behind."""
    real_write = tritonserver.write_python_model

    def write_broken(out, name, *args, **kwargs):
        model_dir, batched = real_write(out, name, *args, **kwargs)
        model_py = model_dir / "1" / "model.py"
        model_py.write_text(model_py.read_text().replace(
            "        config = json.loads(", "        raise RuntimeError('stub cannot load: test')\n"
                                           "        config = json.loads(", 1))
        return model_dir, batched

    monkeypatch.setattr(tritonserver, "write_python_model", write_broken)
    http_port, grpc_port = free_loopback_ports(2)
    options = ServeOptions(source=str(exported["1"]), http_port=http_port, grpc_port=grpc_port, metrics_port=None,
                           triton_log=str(tmp_path / "triton.log"), server="tritonserver")
    with pytest.raises(FusedopsError, match="tritonserver did not start serving .*stub cannot load: test"):
        tritonserver.serve_tritonserver(options, ready=lambda info: pytest.fail(f"ready: {info}"))
    assert not tritonserver._model_ready(f"http://127.0.0.1:{http_port}/v2/health/live")
