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


# How one point is measured, in order: perf_analyzer's time windows until three agree; where that fails or does
# not finish, one fixed count of requests (no stability loop); then the same count with its asynchronous client
# (a few threads instead of one per request in flight). 2026-11-27 (H200): the windowed point at concurrency 64
# did not finish in 66 s after c = 1 and c = 8 had; the fallbacks are recorded in each point's "mode".
MODES = ("windows", "request_count", "async")


def command(exe: str, url: str, model: str, concurrency: int, csv_path: Path, batch: int = 1,
            window_ms: int = 3000, max_trials: int = 6, mode: str = "windows",
            extra_args: tuple[str, ...] = ()) -> list[str]:
    """One point: gRPC, ``batch`` rows a request, ``concurrency`` requests in flight, random input data. ``mode``
    "windows": measured in windows of ``window_ms`` until three agree within 15 % or ``max_trials`` windows passed;
    "request_count": one measurement of ``requests_for(concurrency)`` requests; "async": that with the async client.
    ``extra_args``: more perf_analyzer flags (e.g. ``--shared-memory system``)."""
    cmd = [exe, "-m", model, "-u", url, "-i", "grpc", "-b", str(batch),
           "--concurrency-range", f"{concurrency}:{concurrency}"]
    if mode == "windows":
        cmd += ["--measurement-interval", str(window_ms), "--max-trials", str(max_trials),
                "--stability-percentage", "15"]
    elif mode in ("request_count", "async"):
        # warm-up first: a counted point may be a fresh server's first traffic (2026-11-27 09:09, H200: c = 1 mean
        # 0.758 ms with a 4.5 ms deviation from the first requests)
        count = requests_for(concurrency)
        cmd += ["--request-count", str(count), "--warmup-request-count", str(count // 10)]
        cmd += ["--async"] if mode == "async" else []
    else:
        raise FusedopsError(f"perf_analyzer mode {mode!r} is not one of {', '.join(MODES)}")
    return cmd + list(extra_args) + ["-f", str(csv_path)]


def requests_for(concurrency: int) -> int:
    """The fixed request count of a counted point: 2000 a request in flight (c = 64: 128 000, a few seconds)."""
    return 2000 * concurrency


def _text(output) -> str:
    """A child's captured output as text (TimeoutExpired carries bytes even with text=True)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _measure(cmd: list[str], csv_path: Path, limit_s: float, log_path: Path | None) -> dict:
    """One perf_analyzer run: its CSV's point, or {"error": ...} naming the exit status or the time limit and the
    last line it printed; its whole output goes to ``log_path`` when given."""
    output = ""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s)
        output = proc.stdout + proc.stderr
        if proc.returncode != 0 or not csv_path.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            point = {"error": f"perf_analyzer exit {proc.returncode}: {' | '.join(tail)}"}
        else:
            point = parse_csv(csv_path.read_text())[0]
    except subprocess.TimeoutExpired as e:
        output = _text(e.stdout) + _text(e.stderr)
        point = {"error": f"perf_analyzer did not finish in {limit_s:.0f} s (last output: {_last_line(output)})"}
    except FusedopsError as e:
        point = {"error": str(e)}
    if log_path is not None:
        log_path.write_text(" ".join(cmd) + "\n" + output)
    return point


def run_points(url: str, model: str, concurrency: list[int], batch: int = 1, window_ms: int = 3000,
               max_trials: int = 6, log=None, log_dir: Path | None = None,
               modes: tuple[str, ...] = MODES, extra_args: tuple[str, ...] = ()) -> list[dict]:
    """perf_analyzer at each concurrency against a loopback gRPC ``url``, each point in the first of ``modes`` that
    succeeds; a point that fails in all of them is recorded with their errors (the sweep goes on). ``log_dir``: each
    run's command and output as perf_analyzer_c<C>_<mode>.log; ``extra_args`` go to every run."""
    check_url(url)
    exe = binary()
    if exe is None:
        raise FusedopsError(unavailable_reason() or "perf_analyzer is not installed")
    log = log or (lambda text: print(text, file=sys.stderr))
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    points = []
    with tempfile.TemporaryDirectory(prefix="fusedops-pa-") as tmp:
        for c in concurrency:
            errors = []
            for mode in modes:
                csv_path = Path(tmp) / f"c{c}_{mode}.csv"
                # windows: its own windows (1.2 x each) twice over; counted: a minute; both plus start-up
                limit = 30 + (2.4 * max_trials * window_ms / 1e3 if mode == "windows" else 60)
                log_path = log_dir / f"perf_analyzer_c{c}_{mode}.log" if log_dir is not None else None
                cmd = command(exe, url, model, c, csv_path, batch, window_ms, max_trials, mode, extra_args)
                point = _measure(cmd, csv_path, limit, log_path)
                if "error" not in point:
                    break
                errors.append(f"{mode}: {point['error']}")
                log(f"perf_analyzer c={c} ({mode}): {point['error']}")
            if errors and "error" in point:
                point = {"error": "; ".join(errors)}
            point.update(concurrency=c, batch=batch)
            if "error" not in point:
                point["mode"] = mode
                log(f"perf_analyzer c={c} ({mode}): p50 {point['p50_ms']:.3f} p99 {point['p99_ms']:.3f} ms, "
                    f"{point['throughput_inf_s']:.1f} inf/s")
            points.append(point)
    return points
