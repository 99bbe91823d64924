"""fusedops' native Triton backend (plugins/triton, ``fusedops serve --server native``) beyond test_serve.py's shared
checks (which run every client test and the unbatched model against it too): SIGTERM under load, the refusals of the
serve command, and tritonserver started by hand on repositories whose fusedops_backend.cfg is wrong: the model fails
to load with the backend's message naming the problem, and a model path leaving the model folder is refused."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pytriton", reason="PyTriton (the serve extra) is not installed: pip install -e '.[serve]'")
httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] (the serve extra) is not installed")

from fusedops import ort as fo_ort  # noqa: E402
from fusedops.api import export  # noqa: E402
from fusedops.errors import FusedopsError  # noqa: E402
from fusedops.models.registry import get_entry  # noqa: E402
from fusedops.serve.backends import onnx_specs  # noqa: E402
from fusedops.serve.native_repo import CONFIG_FILE, backend_library, write_native_model  # noqa: E402
from fusedops.serve.process import free_loopback_ports, start_server  # noqa: E402
from fusedops.serve.server import ServeOptions, check_options  # noqa: E402
from fusedops.serve.tritonserver import _backend_folder, _server_env, bundled_tritonserver  # noqa: E402
from serve_support import TIMEOUT_S, eager_float64, fresh, grpc_infer, http_infer, native_unavailable  # noqa: E402

ATOL = RTOL = 1e-4
pytestmark = pytest.mark.skipif(fo_ort.unavailable_reason() is not None or native_unavailable() is not None,
                                reason=f"libfusedops_ort.so or the native backend is not built: "
                                       f"{fo_ort.unavailable_reason() or native_unavailable()}")


@pytest.fixture(scope="module")
def model1_onnx(tmp_path_factory):
    return export("1", str(tmp_path_factory.mktemp("native") / "model1.onnx"))


def test_sigterm_under_load_exits_0_and_every_answer_is_right(model1_onnx, tmp_path):
    srv = start_server(str(model1_onnx), tmp_path / "srv", "--server", "native", "--exit-timeout", "20")
    answered, wrong, stop = [0], [], threading.Event()
    # one reference model for the client threads (building one draws weights from torch's global generator)
    reference = get_entry("1").build("small").double()

    def client(k):
        while not stop.is_set():
            x = fresh((1 + k % 3, 96), f"load-{k}-{answered[0]}")
            try:
                y = grpc_infer(srv, x)
            except Exception:  # refused once the server drains: fine, as long as nothing answered is wrong
                return
            with torch.no_grad():
                want = reference(torch.from_numpy(x).double()).numpy()
            if not np.allclose(y, want, atol=ATOL, rtol=RTOL):
                wrong.append(k)
            answered[0] += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    try:
        for t in threads:
            t.start()
        time.sleep(2.0)
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=60)
        stop.set()
        for t in threads:
            t.join(TIMEOUT_S)
    finally:
        stop.set()
        srv.stop()
    assert answered[0] > 10 and not wrong, (answered[0], wrong)
    assert rc == 0, srv.log()[-2000:]


def test_native_serves_onnx_runtime_only_and_takes_instances():
    check_options(ServeOptions(source="m.onnx", server="native", instances=2))  # sessions in the server
    with pytest.raises(FusedopsError, match="instances"):
        check_options(ServeOptions(source="m.plan", instances=2))  # auto: PyTriton for an engine
    with pytest.raises(FusedopsError, match="native backend serves ort-cpu or ort-cuda"):
        write_native_model(Path("unused"), "m", "m.onnx", "torch-cuda", [], [])


def test_repository_names_the_backend_and_what_it_loads(model1_onnx, tmp_path):
    inputs, outputs = onnx_specs(model1_onnx)
    model_dir, batched = write_native_model(tmp_path, "m1", str(model1_onnx), "ort-cpu", inputs, outputs,
                                            max_batch_size=16, instances=2, intra_op_threads=1)
    config = (model_dir / "config.pbtxt").read_text()
    assert batched and 'backend: "fusedops"' in config and "KIND_CPU" in config and "count: 2" in config, config
    settings = dict(line.split("=", 1) for line in (model_dir / CONFIG_FILE).read_text().splitlines()
                    if line and not line.startswith("#"))
    assert settings["model"] == "1/model.onnx" and (model_dir / "1" / "model.onnx").is_file()
    assert Path(settings["op_library"]) == fo_ort.library_path() and Path(settings["onnxruntime_library"]).is_file()
    assert settings["provider"] == "cpu" and settings["batched"] == "1" and settings["intra_op_threads"] == "1"
    assert settings["max_rows"] == "0"  # batched: Triton bounds dim 0 by max_batch_size
    with pytest.raises(FusedopsError, match="exists"):  # nothing the user has is overwritten without --force
        write_native_model(tmp_path, "m1", str(model1_onnx), "ort-cpu", inputs, outputs)


def _tritonserver_command(repo: Path, workspace: Path, with_backend: bool = True) -> tuple[list[str], dict, int]:
    """PyTriton's tritonserver on `repo` (with_backend: libtriton_fusedops.so in its backend directory, else only
    the Python backend there); (command, environment, HTTP port)."""
    binary, libs, python_backend, stub = bundled_tritonserver()
    backends = _backend_folder(workspace, python_backend, stub, backend_library() if with_backend else None)
    http, grpc = free_loopback_ports(2)
    cmd = [str(binary), f"--model-repository={repo}", f"--backend-directory={backends}", "--model-control-mode=none",
           "--exit-on-error=true", "--allow-metrics=false", "--http-address=127.0.0.1", f"--http-port={http}",
           "--grpc-address=127.0.0.1", f"--grpc-port={grpc}"]
    return cmd, _server_env(libs), http


def _run_tritonserver(repo: Path, workspace: Path) -> str:
    """tritonserver on `repo` with the native backend until it gives up loading (it exits when a model fails);
    returns its log."""
    cmd, env, _ = _tritonserver_command(repo, workspace)
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"tritonserver kept running with a broken model: {e.stdout!r}")
    assert done.returncode != 0
    return done.stdout + done.stderr


@pytest.mark.parametrize("edit,words", [
    (("provider=cpu", "provider=tpu"), "provider must be cpu or cuda"),
    (("model=1/model.onnx", "model=../../outside.onnx"), "no '..'"),
    (("model=1/model.onnx", "model=1/missing.onnx"), "missing.onnx"),
    (("batched=1", "batched=yes"), "batched must be 0 or 1"),
    (("provider=cpu", "color=blue"), "unknown key 'color'"),
    (("max_rows=0", "max_rows=-3"), "max_rows must be an integer"),
])
def test_a_wrong_backend_file_fails_the_model_with_the_reason(model1_onnx, tmp_path, edit, words):
    inputs, outputs = onnx_specs(model1_onnx)
    model_dir, _ = write_native_model(tmp_path / "repo", "m1", str(model1_onnx), "ort-cpu", inputs, outputs)
    cfg = model_dir / CONFIG_FILE
    cfg.write_text(cfg.read_text().replace(*edit))
    log = _run_tritonserver(tmp_path / "repo", tmp_path / "ws")
    assert "fusedops backend" in log and words in log, log[-3000:]


def test_repo_command_writes_a_repository_that_carries_its_backend(model1_onnx, tmp_path, capsys):
    """`fusedops repo --backend native`: a tritonserver whose backend directory lacks fusedops still serves the model
    (Triton loads the backend's library from the model folder), with the ORT and op libraries the folder carries."""
    from fusedops.cli import main  # lazy: the CLI's entry, as a user runs it

    out = tmp_path / "repo"
    assert main(["repo", str(model1_onnx), "--out-dir", str(out), "--backend", "native", "--runtime", "ort-cpu"]) == 0
    assert "tritonserver --model-repository=" in capsys.readouterr().out
    folder = out / "fusedops"
    assert (folder / "libtriton_fusedops.so").is_file() and (folder / "libfusedops_ort.so").is_file()
    assert list((folder / "onnxruntime").glob("libonnxruntime.so*"))
    cmd, env, http = _tritonserver_command(out, tmp_path / "ws", with_backend=False)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            try:
                with httpclient.InferenceServerClient(f"127.0.0.1:{http}", network_timeout=5) as c:
                    if c.is_model_ready("fusedops"):
                        break
            except Exception:  # not listening yet
                pass
            time.sleep(0.3)
        srv = type("Server", (), {"http_url": f"127.0.0.1:{http}", "model_name": "fusedops"})()
        x = fresh((4, 96), "repo-native")
        np.testing.assert_allclose(http_infer(srv, x), eager_float64("1", x), atol=ATOL, rtol=RTOL)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_repo_defaults_to_two_cuda_sessions_as_serve_does(model1_onnx, tmp_path, monkeypatch):
    """`fusedops repo --backend native` without --instances: 1 session on the CPU EP, 2 on the CUDA EP (the library's
    CUDA build is faked: only the written config is checked), as `fusedops serve` defaults."""
    from fusedops.serve.native_repo import write_native_repository
    from fusedops.serve.repository import RepoOptions

    cpu = write_native_repository(RepoOptions(source=str(model1_onnx), out=str(tmp_path / "cpu"), instances=None),
                                  "ort-cpu")
    assert "count: 1" in cpu.config_path.read_text() and "KIND_CPU" in cpu.config_path.read_text()
    monkeypatch.setattr(fo_ort, "library_has_cuda", lambda: True)
    gpu = write_native_repository(RepoOptions(source=str(model1_onnx), out=str(tmp_path / "gpu"), instances=None),
                                  "ort-cuda")
    assert "count: 2" in gpu.config_path.read_text() and "KIND_GPU" in gpu.config_path.read_text()
    three = write_native_repository(RepoOptions(source=str(model1_onnx), out=str(tmp_path / "three"), instances=3),
                                    "ort-cuda")
    assert "count: 3" in three.config_path.read_text()
