"""`fusedops serve --server pytriton`: a real Triton Inference Server in-process through PyTriton, serving one fused
model; and what both serving paths share (options, checks, the batching inference function, the ready line). The
default path, the model inside tritonserver's Python-backend stub, is ``tritonserver.py``.

PyTriton (``nvidia-pytriton``, the ``serve`` extra) starts the ``tritonserver`` its wheel carries with the Python
backend; Triton does the networking (KServe v2 over HTTP and gRPC), request validation against the model
configuration, and dynamic batching; each batch reaches ``_infer`` in this process, which runs it on the backend that
``backends.open_backend`` chose. SIGINT / SIGTERM stop it cleanly: Triton stops taking requests, finishes the ones in
flight (up to ``exit_timeout_s``), then the process exits 0.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import socket
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from fusedops.errors import FusedopsError

from .backends import ENGINE_SUFFIXES, ServedModel, open_backend
from .native_repo import backend_built, default_instances
from .repository import DEFAULT_MAX_QUEUE_DELAY_US

LOOPBACK = "127.0.0.1"


@dataclass
class ServeOptions:
    source: str  # fused .onnx, TensorRT .plan, or a reference model key
    backend: str = "auto"
    size: str = "small"  # for model keys
    model_name: str = "fusedops"
    host: str = LOOPBACK
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int | None = 8002  # None: no metrics endpoint
    max_batch_size: int = 64
    max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US
    exit_timeout_s: int = 10
    log_verbose: int = 0
    triton_log: str | None = None  # tritonserver's own log file; None: a fresh temporary file (named when ready)
    # tritonserver: the model in the Python-backend stub; native: fusedops' C++ Triton backend (ONNX Runtime in
    # tritonserver's process); pytriton: PyTriton's proxy to this process; auto: see resolve_server
    server: str = "auto"
    # model instances (stub processes / native sessions) on the tritonserver and native paths; None: resolve_instances
    instances: int | None = None


SERVERS = ("auto", "tritonserver", "native", "pytriton")


def resolve_server(o: ServeOptions) -> str:
    """The serving path ``o.server`` names. "auto": PyTriton's for a TensorRT engine; the native backend for a fused
    .onnx on ONNX Runtime where libtriton_fusedops.so is built (measured faster than the stub at every concurrency:
    docs/serving_native.md); the Python-backend stub otherwise (PyTorch backends, model keys)."""
    if o.server != "auto":
        return o.server
    suffix = Path(o.source).suffix.lower()
    if suffix in ENGINE_SUFFIXES:
        return "pytriton"
    if suffix == ".onnx" and o.backend in ("auto", "ort-cuda", "ort-cpu") and backend_built():
        return "native"
    return "tritonserver"


def resolve_instances(o: ServeOptions, server: str, backend: str) -> int:
    """``o.instances``, or by default the native backend's count for its runtime (native_repo.default_instances) and
    1 stub process (each holds a copy of the model)."""
    if o.instances is not None:
        return o.instances
    return default_instances(backend) if server == "native" else 1


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port_free(host: str, port: int, what: str) -> None:
    """FusedopsError naming the port when something already listens there (Triton would fail later, less clearly)."""
    if not 0 < port < 65536:
        raise FusedopsError(f"{what} port {port} is not a TCP port (1-65535)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # as the servers bind theirs: connections of an earlier server still in TIME_WAIT do not make it busy
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise FusedopsError(f"{what} port {port} on {host} is not free ({e.strerror}); pass another "
                                f"--{what}-port") from None


def check_options(o: ServeOptions) -> None:
    if o.server not in SERVERS:
        raise FusedopsError(f"--server must be one of {', '.join(SERVERS)}, got {o.server!r}")
    if o.instances is not None and (o.instances < 1 or (o.instances > 1 and resolve_server(o) == "pytriton")):
        raise FusedopsError(f"--instances must be >= 1, and more than 1 needs --server tritonserver or native "
                            f"(PyTriton's path runs one inference function), got {o.instances} with --server "
                            f"{o.server}")
    if o.max_batch_size < 1:
        raise FusedopsError(f"--max-batch-size must be >= 1, got {o.max_batch_size}")
    if o.max_queue_delay_us < 0:
        raise FusedopsError(f"--max-queue-delay-us must be >= 0, got {o.max_queue_delay_us}")
    if o.exit_timeout_s < 1:
        raise FusedopsError(f"--exit-timeout must be >= 1 s, got {o.exit_timeout_s}")
    ports = {"http": o.http_port, "grpc": o.grpc_port}
    if o.metrics_port is not None:
        ports["metrics"] = o.metrics_port
    if len(set(ports.values())) != len(ports):
        raise FusedopsError(f"the HTTP, gRPC and metrics ports must differ, got {ports}")
    for what, port in ports.items():
        check_port_free(o.host, port, what)


def _python_library_first() -> None:
    """Put this interpreter's libpython first on LD_LIBRARY_PATH (inherited by tritonserver and its Python-backend
    stub). PyTriton's stub links ``libpython3.X.so.1.0`` by soname; without this it may load the system's copy of a
    different patch release, whose C modules do not match this interpreter's standard library (measured here:
    pyenv 3.11.7 + Debian's libpython 3.11.2 fails in multiprocessing with ``'_thread.RLock' object has no attribute
    '_recursion_count'``)."""
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
    if not libdir or not (Path(libdir) / soname).is_file():
        return
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if current.split(":")[:1] != [libdir]:
        os.environ["LD_LIBRARY_PATH"] = f"{libdir}:{current}" if current else libdir


def _pytriton():
    try:  # lazy: optional (serve extra); its absence is reported in one line
        from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
        from pytriton.triton import Triton, TritonConfig
    except ImportError as e:
        raise FusedopsError(f"PyTriton is not installed ({e}); install the serve extra: pip install -e '.[serve]'") \
            from None
    return Triton, TritonConfig, ModelConfig, DynamicBatcher, Tensor


# Test hook: milliseconds to hold every batch before running it, so a test can have requests in flight when it sends
# SIGTERM (the drain test). Unset in normal use.
TEST_DELAY_ENV = "FUSEDOPS_SERVE_TEST_DELAY_MS"


def make_infer(served: ServedModel, max_batch_size: int):
    """The callable PyTriton calls with a list of requests (one per client request in the dynamic batch): batched
    models run the requests as one concatenated batch and split the outputs back; unbatched ones run each request."""
    in_names = [t.name for t in served.inputs]
    delay_s = float(os.environ.get(TEST_DELAY_ENV, "0") or 0) / 1e3

    def run_one(feeds):
        for name in in_names:  # Triton checked names, dtypes and dims against the config; this is the batch bound
            if not served.batched and feeds[name].ndim and feeds[name].shape[0] > max_batch_size:
                raise ValueError(f"input {name!r} has {feeds[name].shape[0]} rows; this server takes at most "
                                 f"{max_batch_size} (--max-batch-size)")
        return served.infer({n: np.ascontiguousarray(feeds[n]) for n in in_names})

    def infer(requests):
        if delay_s:
            time.sleep(delay_s)
        if not served.batched or len(requests) == 1:
            return [run_one(r) for r in requests]
        sizes = [int(r[in_names[0]].shape[0]) for r in requests]
        feeds = {n: np.concatenate([r[n] for r in requests]) for n in in_names}
        out = served.infer(feeds)
        split = np.cumsum(sizes)[:-1]
        per_output = {k: np.split(v, split) for k, v in out.items()}
        return [{k: parts[i] for k, parts in per_output.items()} for i in range(len(requests))]

    return infer


def triton_tensors(served: ServedModel, Tensor):
    """PyTriton tensor specs: per-sample shapes (batch dim dropped) for a batched model, full shapes otherwise."""
    def tensors(specs):
        return [Tensor(name=t.name, dtype=t.dtype.type, shape=t.shape[1:] if served.batched else t.shape)
                for t in specs]
    return tensors(served.inputs), tensors(served.outputs)


class _StopRequest:
    """Set by SIGINT / SIGTERM; the serving loop polls it (signal handlers run in the main thread)."""

    def __init__(self):
        self.event = threading.Event()
        self.signal_name: str | None = None

    def __call__(self, signum, _frame):
        self.signal_name = signal.Signals(signum).name
        self.event.set()

    def wait(self, death: Callable[[], str | None]) -> int:
        """Serve until a signal (0) or until ``death()`` names why the server stopped by itself (1, said on stderr)."""
        while not self.event.wait(0.5):
            why = death()
            if why is not None:
                print(f"fusedops serve: error: {why}", file=sys.stderr)
                return 1
        print(f"fusedops serve: {self.signal_name}: draining in-flight requests and stopping", file=sys.stderr)
        return 0


def serve(o: ServeOptions, ready=None) -> int:
    """PyTriton's path (``--server pytriton``): serve until SIGINT / SIGTERM (exit 0) or until Triton dies (exit 1).
    ``ready(info)`` is called once the model answers (default: print one line to stdout). The default path,
    ``--server tritonserver``, is ``tritonserver.serve_tritonserver``."""
    check_options(o)
    Triton, TritonConfig, ModelConfig, DynamicBatcher, Tensor = _pytriton()
    if not is_loopback(o.host):
        print(f"fusedops serve: warning: listening on {o.host}, not loopback: anyone who can reach this machine can "
              f"send requests", file=sys.stderr)
    served = open_backend(o.source, o.backend, o.size)
    _python_library_first()
    logging.getLogger("pytriton").setLevel(logging.WARNING)
    # tritonserver's log goes to a file, so stdout carries only this command's own lines (the ready line first).
    log_path = Path(o.triton_log) if o.triton_log else Path(tempfile.mkdtemp(prefix="fusedops-serve-")) / "triton.log"

    cfg = TritonConfig(http_address=o.host, http_port=o.http_port, grpc_address=o.host, grpc_port=o.grpc_port,
                       allow_metrics=o.metrics_port is not None, metrics_address=o.host if o.metrics_port else None,
                       metrics_port=o.metrics_port, exit_timeout_secs=o.exit_timeout_s, log_verbose=o.log_verbose,
                       log_file=log_path, allow_sagemaker=False, allow_vertex_ai=False)
    inputs, outputs = triton_tensors(served, Tensor)
    if served.batched:
        model_config = ModelConfig(max_batch_size=o.max_batch_size,
                                   batcher=DynamicBatcher(max_queue_delay_microseconds=o.max_queue_delay_us))
    else:
        model_config = ModelConfig(batching=False)
        served.notes.append("served unbatched (max_batch_size 0): an output does not keep the batch in dim 0")

    stop = _StopRequest()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    triton = Triton(config=cfg)
    rc = 0
    try:
        triton.bind(model_name=o.model_name, infer_func=make_infer(served, o.max_batch_size), inputs=inputs,
                    outputs=outputs, config=model_config, strict=True)
        try:
            triton.run()
        except Exception as e:  # PyTriton raises its own types; Triton's log says why
            raise FusedopsError(f"Triton did not start serving {o.source!r} ({type(e).__name__}: {e}); its last "
                                f"error: {_last_error(log_path)} (full log: {log_path})") from None
        info = {"model": o.model_name, "backend": served.backend, "device": served.device, "server": "pytriton",
                "http": f"{o.host}:{o.http_port}", "grpc": f"{o.host}:{o.grpc_port}", "batched": served.batched,
                "max_batch_size": o.max_batch_size if served.batched else 0, "notes": served.notes,
                "triton_log": str(log_path)}
        (ready or _print_ready)(info)
        rc = stop.wait(lambda: None if triton.is_alive() else "Triton stopped unexpectedly")
    finally:
        t0 = time.monotonic()
        triton.stop()  # SIGINT to tritonserver: it refuses new requests and finishes the ones in flight
        for s, h in previous.items():
            signal.signal(s, h)
    if stop.signal_name:
        print(f"fusedops serve: stopped in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return rc


def _last_error(path: Path) -> str:
    """The last error line of Triton's log (its lines start with E for errors), for a one-line message."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    errors = [ln for ln in lines if ln[:1] == "E"]
    return (errors or lines or ["(empty log)"])[-1].strip()[:500]


def _print_ready(info: dict) -> None:
    print(f"fusedops serve: ready: model {info['model']!r} on {info['backend']} ({info['device']}) via "
          f"{info['server']}, "
          f"KServe v2 HTTP {info['http']} gRPC {info['grpc']}, max_batch_size {info['max_batch_size']}, "
          f"{info.get('instances', 1)} model instance(s); "
          f"Triton's log: {info['triton_log']}", flush=True)
    for note in info["notes"]:
        print(f"fusedops serve: note: {note}", flush=True)
