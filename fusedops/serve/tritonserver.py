"""`fusedops serve --server tritonserver` (the default): the ``tritonserver`` binary that PyTriton's wheel carries,
run directly on a Python-backend model repository whose model (``triton_model.py``) loads the fused model inside
the backend's stub process. `--server native`: the same binary on a repository for fusedops' own C++ backend
(``native_repo.py``, plugins/triton), ONNX Runtime in tritonserver's process, no stub.

Why not PyTriton's own path: PyTriton's stub forwards every batch over ZeroMQ to the ``fusedops serve`` process and
back; measured on the CPU machine (docs/serving.md) that hop costs ≈ 3 ms of the ≈ 4 ms a request took, while the
model ran 0.1-0.2 ms. Here the stub runs the model itself. Everything Triton does is unchanged (KServe v2 over HTTP
and gRPC, validation against the config, dynamic batching, draining on SIGINT / SIGTERM).

The process: choose the backend (as PyTriton's path does) → a model key on ONNX Runtime is exported and fused →
a workspace with the repository and a backend folder (links to PyTriton's Python backend and the stub built for
this Python) → tritonserver as a child in this process group → the ready line once the model answers → on SIGINT /
SIGTERM, the signal passed on; tritonserver refuses new requests, finishes those in flight (``--exit-timeout``) and
exits; this process exits 0 when it did. A tritonserver that dies exits 1.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from fusedops.errors import FusedopsError

from .backends import _export_to_temp, choose_backend, onnx_specs, torch_specs
from .native_repo import BACKEND_NAME, backend_library, write_native_model
from .python_repo import write_python_model
from .server import (ServeOptions, _last_error, _print_ready, _StopRequest, check_options, is_loopback,
                     resolve_instances, resolve_server)

STARTUP_TIMEOUT_S = 300.0
# Triton's APIs that change server state; restricted to a header only this process knows (PyTriton does the same).
# Statistics stay open: read-only, and how the serving path is profiled (docs/serving.md).
RESTRICTED_APIS = "shared-memory,model-repository"
SHM_DEFAULT_BYTES = 4 * 1024 * 1024  # the stub's shared-memory pool; it grows by the step below when a batch needs
SHM_GROWTH_BYTES = 1024 * 1024


def bundled_tritonserver() -> tuple[Path, Path, Path, Path]:
    """(tritonserver binary, its bundled libraries, the Python backend folder, the stub for this Python) from
    PyTriton's wheel; FusedopsError naming what is missing."""
    try:
        import pytriton  # lazy: optional (serve extra); its absence is reported in one line
    except ImportError as e:
        raise FusedopsError(f"PyTriton is not installed ({e}); its wheel carries tritonserver: "
                            f"pip install -e '.[serve]'") from None
    root = Path(pytriton.__file__).parent
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    paths = (root / "tritonserver" / "bin" / "tritonserver", root.parent / "nvidia_pytriton.libs",
             root / "tritonserver" / "backends" / "python",
             root / "tritonserver" / "python_backend_stubs" / version / "triton_python_backend_stub")
    for path in paths:
        if not path.exists():
            raise FusedopsError(f"PyTriton's wheel lacks {path.name} (looked for {path}); reinstall nvidia-pytriton")
    return paths


def _cuda_wheel_libraries() -> list[str]:
    """The lib folders of NVIDIA's CUDA wheels (nvidia/*/lib, as torch and onnxruntime-gpu install them): the
    native backend's ONNX Runtime loads cuDNN / cuBLAS by soname inside tritonserver, where no Python preloads them."""
    found = []
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        found += sorted(str(p) for p in Path(site).glob("nvidia/*/lib") if p.is_dir())
    return found


def _server_env(libs: Path, cuda_wheels: bool = False) -> dict[str, str]:
    """tritonserver's environment: this interpreter's libpython first (the stub links it by soname; see
    server._python_library_first), the wheel's bundled libraries (and with ``cuda_wheels`` NVIDIA's CUDA wheels'),
    and this environment's bin first on PATH, so the stub's embedded Python finds this environment's site-packages
    (as PyTriton arranges)."""
    env = dict(os.environ)
    libdir = sysconfig.get_config_var("LIBDIR")
    extra = _cuda_wheel_libraries() if cuda_wheels else []
    ld = [p for p in (libdir, str(libs), *extra, env.get("LD_LIBRARY_PATH", "")) if p]
    env["LD_LIBRARY_PATH"] = ":".join(ld)
    env["PATH"] = f"{Path(sys.exec_prefix) / 'bin'}:{env.get('PATH', '')}"
    return env


def _backend_folder(workspace: Path, python_backend: Path, stub: Path, native: Path | None = None) -> Path:
    """backends/python/ with links to the wheel's Python backend and this Python's stub (the backend runs the stub
    found beside it; the wheel keeps one per Python version elsewhere); with ``native``, also backends/fusedops/
    holding libtriton_fusedops.so."""
    folder = workspace / "backends" / "python"
    folder.mkdir(parents=True)
    for item in python_backend.iterdir():
        if item.is_file():
            (folder / item.name).symlink_to(item)
    (folder / stub.name).symlink_to(stub)
    if native is not None:
        (workspace / "backends" / BACKEND_NAME).mkdir()
        (workspace / "backends" / BACKEND_NAME / native.name).symlink_to(native)
    return folder.parent


def _model_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _command(o: ServeOptions, binary: Path, repo: Path, backends: Path, log_path: Path, token: str) -> list[str]:
    cmd = [str(binary), f"--model-repository={repo}", f"--backend-directory={backends}",
           "--model-control-mode=none", "--strict-readiness=true", f"--exit-timeout-secs={o.exit_timeout_s}",
           f"--http-address={o.host}", f"--http-port={o.http_port}", f"--grpc-address={o.host}",
           f"--grpc-port={o.grpc_port}", f"--log-verbose={o.log_verbose}", f"--log-file={log_path}",
           f"--http-restricted-api={RESTRICTED_APIS}:fusedops-admin={token}",
           f"--grpc-restricted-protocol={RESTRICTED_APIS}:fusedops-admin={token}",
           "--allow-sagemaker=false", "--allow-vertex-ai=false",
           f"--backend-config=python,shm-region-prefix-name=fusedops{os.getpid()}-{token[:8]}",
           f"--backend-config=python,shm-default-byte-size={SHM_DEFAULT_BYTES}",
           f"--backend-config=python,shm-growth-byte-size={SHM_GROWTH_BYTES}"]
    if o.metrics_port is None:
        cmd.append("--allow-metrics=false")
    else:
        cmd += [f"--metrics-address={o.host}", f"--metrics-port={o.metrics_port}"]
    return cmd


def serve_tritonserver(o: ServeOptions, ready=None) -> int:
    """Serve until SIGINT / SIGTERM (exit 0 once tritonserver drained and stopped) or until it dies (exit 1)."""
    check_options(o)
    binary, libs, python_backend, stub = bundled_tritonserver()
    if not is_loopback(o.host):
        print(f"fusedops serve: warning: listening on {o.host}, not loopback: anyone who can reach this machine can "
              f"send requests", file=sys.stderr)
    native = resolve_server(o) == "native"
    if native and o.backend == "auto":  # the native backend runs ONNX Runtime: its CUDA EP where it can, else CPU
        try:
            backend, kind = choose_backend(o.source, "ort-cuda")
        except FusedopsError:
            backend, kind = choose_backend(o.source, "ort-cpu")
    else:
        backend, kind = choose_backend(o.source, o.backend)
    if native and not backend.startswith("ort-"):
        raise FusedopsError(f"--server native runs ONNX Runtime (ort-cpu / ort-cuda), not {backend}; serve PyTorch "
                            f"backends with --server tritonserver")
    native_lib = backend_library() if native else None
    instances = resolve_instances(o, "native" if native else "tritonserver", backend)
    if kind == "engine":
        raise FusedopsError("--server tritonserver runs ONNX Runtime or PyTorch in the Python backend; serve a "
                            "TensorRT engine with --server pytriton, or with tritonserver's TensorRT backend "
                            "(`fusedops repo`)")
    source = o.source
    if kind == "model" and backend.startswith("ort-"):  # exported and fused here, once
        source = str(_export_to_temp(o.source, o.size))
    inputs, outputs = onnx_specs(source) if source.lower().endswith(".onnx") else torch_specs(source, o.size)

    workspace = Path(tempfile.mkdtemp(prefix="fusedops-serve-"))
    log_path = Path(o.triton_log) if o.triton_log else workspace / "triton.log"
    if native:  # libtriton_fusedops.so in tritonserver's process: KIND_GPU instances for ort-cuda
        _, batched = write_native_model(workspace / "repo", o.model_name, source, backend, inputs, outputs,
                                        max_batch_size=o.max_batch_size, max_queue_delay_us=o.max_queue_delay_us,
                                        instances=instances, copy_source=False)
    else:  # KIND_CPU, as PyTriton deploys its models: the stub itself puts its work on the GPU
        _, batched = write_python_model(workspace / "repo", o.model_name, source, backend, o.size, inputs, outputs,
                                        max_batch_size=o.max_batch_size, max_queue_delay_us=o.max_queue_delay_us,
                                        instances=instances, kind="cpu", sys_path=[p for p in sys.path if p],
                                        copy_source=False)
    backends = _backend_folder(workspace, python_backend, stub, native_lib)
    token = secrets.token_urlsafe(16)
    # stdout / stderr of tritonserver (and of the stub: the model's own prints) go to the same log file.
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(_command(o, binary, workspace / "repo", backends, log_path, token), stdout=log,
                                stderr=subprocess.STDOUT, env=_server_env(libs, native and backend == "ort-cuda"))
    stop = _StopRequest()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    rc = 0
    try:
        host = "127.0.0.1" if o.host in ("0.0.0.0", "") else f"[{o.host}]" if ":" in o.host else o.host
        _wait_ready(proc, f"http://{host}:{o.http_port}/v2/models/{o.model_name}/ready", log_path, stop, o.source)
        if not stop.event.is_set():
            notes = [] if batched else ["served unbatched (max_batch_size 0): an output does not keep the batch in "
                                        "dim 0"]
            device = "cuda" if backend in ("ort-cuda", "torch-cuda") or (backend == "torch-eager" and _cuda()) \
                else "cpu"
            (ready or _print_ready)({
                "model": o.model_name, "backend": backend, "device": device,
                "server": "tritonserver (native fusedops backend)" if native else "tritonserver",
                "http": f"{o.host}:{o.http_port}", "grpc": f"{o.host}:{o.grpc_port}", "batched": batched,
                "max_batch_size": o.max_batch_size if batched else 0, "instances": instances, "notes": notes,
                "triton_log": str(log_path)})
        rc = stop.wait(lambda: None if proc.poll() is None else
                       f"tritonserver stopped unexpectedly (exit {proc.returncode}); its last error: "
                       f"{_last_error(log_path)}")
    finally:
        t0 = time.monotonic()
        rc = _stop(proc, o.exit_timeout_s) or rc
        for s, h in previous.items():
            signal.signal(s, h)
        shutil.rmtree(workspace / "repo", ignore_errors=True)
        shutil.rmtree(workspace / "backends", ignore_errors=True)
    if stop.signal_name:
        print(f"fusedops serve: stopped in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return rc


def _cuda() -> bool:
    import torch  # lazy: torch; only to name the device of a torch-eager model in the ready line

    return torch.cuda.is_available()


def _wait_ready(proc: subprocess.Popen, url: str, log_path: Path, stop: _StopRequest, source: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not stop.event.is_set():
        if proc.poll() is not None:
            raise FusedopsError(f"tritonserver did not start serving {source!r} (exit {proc.returncode}); its last "
                                f"error: {_last_error(log_path)} (full log: {log_path})")
        if _model_ready(url):
            return
        if time.monotonic() > deadline:
            raise FusedopsError(f"tritonserver was not ready in {STARTUP_TIMEOUT_S:.0f} s; its last error: "
                                f"{_last_error(log_path)} (full log: {log_path})")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen, exit_timeout_s: int) -> int:
    """SIGTERM to tritonserver (it drains for up to exit_timeout_s) and wait; 0 when it exited cleanly, else 1
    (killed after the drain time and a margin)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=exit_timeout_s + 15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            return 1
    return 0 if proc.returncode == 0 else 1
