"""Triton's own load generator, perf_analyzer, as a second client of the serving sweep.

perf_analyzer (PyPI ``perf-analyzer``, a C++ gRPC client) measures what Triton users quote: latency percentiles and
throughput at a fixed concurrency, with the server's queue / compute breakdown. It checks no response values, so the
sweep keeps ``fusedops loadtest`` (every response against float64) for correctness and runs perf_analyzer beside it
for the timing a client without Python's per-request cost sees. Its only wheel is ``manylinux_2_38`` (glibc 2.38,
GLIBCXX 3.4.32): where it cannot run, ``unavailable_reason`` says so and the sweep goes on without it.

Traffic goes to loopback only (``loadtest.check_url``); each point is bounded by perf_analyzer's own measurement
windows and trials and by a wall-clock timeout.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fusedops.errors import FusedopsError

from .loadtest import check_url

# perf_analyzer's CSV header names (µs values), mapped to the sweep's point fields (ms)
_LATENCY_COLUMNS = {"p50 latency": "p50_ms", "p90 latency": "p90_ms", "p95 latency": "p95_ms",
                    "p99 latency": "p99_ms", "Avg latency": "mean_ms"}
_BREAKDOWN_COLUMNS = {"Client Send": "client_send", "Network+Server Send/Recv": "network_server_send_recv",
                      "Server Queue": "server_queue", "Server Compute Input": "server_compute_input",
                      "Server Compute Infer": "server_compute_infer", "Server Compute Output": "server_compute_output",
                      "Client Recv": "client_recv"}


def binary() -> str | None:
    """The perf_analyzer executable: on PATH, else inside the installed ``perf_analyzer`` package."""
    found = shutil.which("perf_analyzer")
    if found:
        return found
    try:
        import perf_analyzer  # lazy: an optional tool, present only where its wheel installs
    except ImportError:
        return None
    candidate = Path(perf_analyzer.__file__).parent / "bin" / "perf_analyzer"
    return str(candidate) if candidate.is_file() else None


def unavailable_reason() -> str | None:
    """Why perf_analyzer cannot run here (not installed, or its binary does not start), or None."""
    exe = binary()
    if exe is None:
        return "perf_analyzer is not installed (PyPI perf-analyzer; its wheel needs glibc 2.38)"
    try:
        proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"perf_analyzer does not start: {e}"
    text = proc.stderr + proc.stdout
    # the dynamic loader's words when the wheel's binary needs a newer glibc / libstdc++ than this machine has
    if "error while loading shared libraries" in text or "version `GLIBC" in text:
        lines = [line for line in text.splitlines() if "GLIBC" in line or "error while loading" in line]
        return f"perf_analyzer does not start here: {lines[0].strip() if lines else text.strip()[:200]}"
    return None


def parse_csv(text: str) -> list[dict]:
    """perf_analyzer's ``-f`` CSV (one row per concurrency, µs) as points in the sweep's units (ms, inf/s)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise FusedopsError("perf_analyzer wrote no measurement rows")
    points = []
    for row in rows:
        try:
            point = {"concurrency": int(float(row["Concurrency"])),
                     "throughput_inf_s": float(row["Inferences/Second"])}
            for column, key in _LATENCY_COLUMNS.items():
                point[key] = float(row[column]) / 1e3 if row.get(column) not in (None, "") else None
            point["breakdown_ms"] = {key: float(row[column]) / 1e3 for column, key in _BREAKDOWN_COLUMNS.items()
                                     if row.get(column) not in (None, "")}
        except (KeyError, ValueError) as e:
            raise FusedopsError(f"perf_analyzer's CSV has no usable {e} column; header: {list(rows[0])}") from None
        points.append(point)
    return sorted(points, key=lambda p: p["concurrency"])


def command(exe: str, url: str, model: str, concurrency: int, csv_path: Path, batch: int = 1,
            window_ms: int = 3000, max_trials: int = 6) -> list[str]:
    """One point: gRPC, ``batch`` rows a request, ``concurrency`` requests in flight, random input data, measured
    in windows of ``window_ms`` until three agree within 15 % or ``max_trials`` windows passed."""
    return [exe, "-m", model, "-u", url, "-i", "grpc", "-b", str(batch),
            "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-interval", str(window_ms),
            "--max-trials", str(max_trials), "--stability-percentage", "15", "-f", str(csv_path)]


def run_points(url: str, model: str, concurrency: list[int], batch: int = 1, window_ms: int = 3000,
               max_trials: int = 6, log=None) -> list[dict]:
    """perf_analyzer at each concurrency against a loopback gRPC ``url``; a point that fails is recorded with its
    error (the sweep goes on)."""
    check_url(url)
    exe = binary()
    if exe is None:
        raise FusedopsError(unavailable_reason() or "perf_analyzer is not installed")
    log = log or (lambda text: print(text, file=sys.stderr))
    points = []
    limit = 30 + 2 * max_trials * window_ms / 1e3  # seconds: its own windows twice over, plus start-up
    with tempfile.TemporaryDirectory(prefix="fusedops-pa-") as tmp:
        for c in concurrency:
            csv_path = Path(tmp) / f"c{c}.csv"
            cmd = command(exe, url, model, c, csv_path, batch, window_ms, max_trials)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
                if proc.returncode != 0 or not csv_path.is_file():
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                    raise FusedopsError(f"perf_analyzer exit {proc.returncode}: {' | '.join(tail)}")
                point = parse_csv(csv_path.read_text())[0]
            except subprocess.TimeoutExpired:
                point = {"concurrency": c, "error": f"perf_analyzer did not finish in {limit:.0f} s"}
            except FusedopsError as e:
                point = {"concurrency": c, "error": str(e)}
            point["batch"] = batch
            points.append(point)
            if "error" in point:
                log(f"perf_analyzer c={c}: {point['error']}")
            else:
                log(f"perf_analyzer c={c}: p50 {point['p50_ms']:.3f} p99 {point['p99_ms']:.3f} ms, "
                    f"{point['throughput_inf_s']:.1f} inf/s")
    return points
