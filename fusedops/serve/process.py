"""`fusedops serve` in a subprocess on free loopback ports: started, waited for, and always torn down.

Used by the tests and the GPU sweep. Ports come from a fixed search on 127.0.0.1 (a bind test over a range chosen by
the process id, so parallel runs rarely collide); readiness is the KServe v2 ``/v2/health/ready`` and model-ready
endpoints; teardown sends SIGTERM, waits, and kills the process group only if it does not exit in time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from fusedops.errors import FusedopsError

LOOPBACK = "127.0.0.1"
PORT_RANGE = (20000, 29999)


def free_loopback_ports(count: int, start: int | None = None) -> list[int]:
    """``count`` distinct TCP ports that can be bound on 127.0.0.1 right now, searched upward from ``start``."""
    lo, hi = PORT_RANGE
    port = start if start is not None else lo + (os.getpid() * 7) % (hi - lo - 1000)
    found: list[int] = []
    for _ in range(hi - lo):
        if port > hi:
            port = lo
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((LOOPBACK, port))
                found.append(port)
            except OSError:
                pass
        port += 1
        if len(found) == count:
            return found
    raise FusedopsError(f"no {count} free loopback ports in {lo}-{hi}")


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    http_port: int
    grpc_port: int
    model_name: str
    log_path: Path
    ready_line: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def http_url(self) -> str:
        return f"{LOOPBACK}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        """Signal the server and wait for it; kills its process group if it has not exited in ``timeout_s``.
        Returns its exit status (negative: killed by that signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return self.proc.returncode


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_server(source: str, workdir: Path, *serve_args: str, model_name: str = "fusedops",
                 startup_timeout_s: float = 180.0, env: dict | None = None) -> ServerProcess:
    """Start ``fusedops serve SOURCE`` on free loopback ports and return once the model is ready (FusedopsError with
    the server's output if it exits or is not ready in time; the process is stopped then)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    http_port, grpc_port = free_loopback_ports(2)
    log_path = workdir / "serve.log"
    cmd = [sys.executable, "-m", "fusedops", "serve", source, "--model-name", model_name, "--host", LOOPBACK,
           "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", "0",
           "--triton-log", str(workdir / "triton.log"), *serve_args]
    out = open(log_path, "w")
    # A new session: the server and the tritonserver it starts form one process group for the teardown.
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **(env or {})})
    out.close()
    server = ServerProcess(proc, http_port, grpc_port, model_name, log_path)
    base = f"http://{LOOPBACK}:{http_port}"
    deadline = time.monotonic() + startup_timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise FusedopsError(f"fusedops serve exited with {proc.returncode} before it was ready:\n"
                                    f"{server.log()[-3000:]}")
            ready_line = next((ln for ln in server.log().splitlines() if "fusedops serve: ready:" in ln), "")
            if ready_line and _http_ok(f"{base}/v2/health/ready") and _http_ok(f"{base}/v2/models/{model_name}/ready"):
                server.ready_line = ready_line
                return server
            time.sleep(0.25)
        raise FusedopsError(f"fusedops serve was not ready in {startup_timeout_s:.0f} s:\n{server.log()[-3000:]}")
    except BaseException:
        server.stop(timeout_s=15)
        raise
