"""perf_analyzer as the sweep's second client: its CSV read in the sweep's units, the loopback rule, a binary that
cannot start reported in one line, a failing point recorded without stopping the others, and the timing targets on
its points. A stand-in executable on PATH plays perf_analyzer (its wheel needs glibc 2.38, which CI lacks); it
writes the CSV the way perf_analyzer's ``-f`` does (header of perf_analyzer's docs, µs)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fusedops.errors import FusedopsError
from fusedops.serve import perf_analyzer
from fusedops.serve.sweep import evaluate_timing

HEADER = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
          "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,"
          "Avg latency,request/response,response wait")


def test_csv_becomes_points_in_milliseconds():
    text = HEADER + "\n64,30123.4,9,120,35,12,410,20,3,2050,2400,2600,3100,2110,64,1900\n" \
                    "1,1612.5,10,95,20,11,380,18,2,612,660,690,790,620,1,600\n"
    points = perf_analyzer.parse_csv(text)
    assert [p["concurrency"] for p in points] == [1, 64]
    c1 = points[0]
    assert c1["throughput_inf_s"] == 1612.5
    assert (c1["p50_ms"], c1["p90_ms"], c1["p95_ms"], c1["p99_ms"], c1["mean_ms"]) == (0.612, 0.66, 0.69, 0.79, 0.62)
    assert c1["breakdown_ms"]["server_queue"] == 0.02 and c1["breakdown_ms"]["server_compute_infer"] == 0.38


def test_csv_of_an_older_perf_analyzer_without_the_mean_column():
    old = "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input," \
          "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n" \
          "1,69.2,225,2148,64,206,11781,19,0,13891,18795,19753,21018\n"
    (point,) = perf_analyzer.parse_csv(old)
    assert point["p50_ms"] == 13.891 and point["mean_ms"] is None


@pytest.mark.parametrize("text, message", [("", "no measurement rows"), (HEADER + "\n", "no measurement rows"),
                                           ("Concurrency,p50 latency\n1,600\n", "no usable 'Inferences/Second'"),
                                           (HEADER + "\nx" + ",1" * 15 + "\n", "no usable")])
def test_broken_csv_is_one_clear_error(text, message):
    with pytest.raises(FusedopsError, match=message):
        perf_analyzer.parse_csv(text)


def _stand_in(tmp_path: Path, monkeypatch, body: str) -> Path:
    """An executable named perf_analyzer first on PATH, running ``body`` (bash) with the real one's arguments."""
    exe = tmp_path / "bin" / "perf_analyzer"
    exe.parent.mkdir()
    exe.write_text("#!/usr/bin/env bash\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    return exe


# Writes the -f CSV: p50 = 500 µs + 10 µs per concurrent request; fails at concurrency 8.
WRITES_CSV = r"""
c=""; f=""
while [[ $# -gt 0 ]]; do case $1 in --concurrency-range) c=${2%%:*}; shift 2;; -f) f=$2; shift 2;; *) shift;; esac; done
[[ $c == 8 ]] && { echo "Failed to obtain stable measurement within 6 measurement windows" >&2; exit 99; }
echo "$HEADER" > "$f"
echo "$c,$((1000 * c)),5,90,20,10,300,15,2,$((500 + 10 * c)),600,650,$((700 + 10 * c)),560,1,480" >> "$f"
"""


def test_run_points_measures_each_concurrency_and_records_a_failure(tmp_path, monkeypatch):
    _stand_in(tmp_path, monkeypatch, f'HEADER="{HEADER}"\n' + WRITES_CSV)
    assert perf_analyzer.unavailable_reason() is None
    logged = []
    points = perf_analyzer.run_points("127.0.0.1:8001", "fusedops", [1, 8, 64], window_ms=100, max_trials=2,
                                      log=logged.append)
    assert [p["concurrency"] for p in points] == [1, 8, 64]
    assert points[0]["p50_ms"] == 0.51 and points[2]["p50_ms"] == 1.14 and points[2]["throughput_inf_s"] == 64000
    assert "exit 99" in points[1]["error"] and "stable measurement" in points[1]["error"]
    # c = 8 fails in each of the three modes, each failure logged
    assert len(logged) == 5 and "c=8 (windows): perf_analyzer exit 99" in logged[1] and "(async)" in logged[3]
    assert points[0]["mode"] == "windows" and "mode" not in points[1]
    targets = evaluate_timing(points, {"host_to_host_p50_ms": 0.2})
    assert targets["p50_c1_vs_inprocess"]["met"] and targets["p99_c1_vs_p50"]["p99_ms"] == 0.71
    assert targets["throughput_c64_over_c1"]["gain"] == 64 and "lost_or_wrong" not in targets
    assert "lost" not in points[0]  # the points are reported as measured


def test_command_asks_for_grpc_fixed_concurrency_and_a_csv(tmp_path):
    cmd = perf_analyzer.command("pa", "127.0.0.1:9", "m", 8, tmp_path / "o.csv", batch=2)
    assert cmd[:7] == ["pa", "-m", "m", "-u", "127.0.0.1:9", "-i", "grpc"]
    assert "--concurrency-range" in cmd and cmd[cmd.index("--concurrency-range") + 1] == "8:8"
    assert cmd[cmd.index("-b") + 1] == "2" and cmd[-1] == str(tmp_path / "o.csv")


def test_only_loopback_targets(tmp_path, monkeypatch):
    _stand_in(tmp_path, monkeypatch, "exit 0\n")
    with pytest.raises(FusedopsError, match="not a loopback address"):
        perf_analyzer.run_points("10.1.2.3:8001", "fusedops", [1])


def test_a_binary_that_needs_a_newer_glibc_is_reported(tmp_path, monkeypatch):
    _stand_in(tmp_path, monkeypatch, "cat >&2 <<'EOF'\nperf_analyzer: /lib/x86_64-linux-gnu/libc.so.6: version "
                                     "`GLIBC_2.38' not found (required by perf_analyzer)\nEOF\n")
    reason = perf_analyzer.unavailable_reason()
    assert reason and "does not start here" in reason and "GLIBC_2.38" in reason


def test_not_installed_is_reported(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(perf_analyzer, "binary", lambda: None)
    assert "not installed" in perf_analyzer.unavailable_reason()
    with pytest.raises(FusedopsError, match="not installed"):
        perf_analyzer.run_points("127.0.0.1:8001", "fusedops", [1])


# Hangs in time-window mode at concurrency 64 (as the real one did on 2026-11-27), writes the CSV when counted.
HANGS_IN_WINDOWS = r"""
c=""; f=""; counted=0
while [[ $# -gt 0 ]]; do case $1 in --concurrency-range) c=${2%%:*}; shift 2;; -f) f=$2; shift 2;;
  --request-count) counted=$2; shift 2;; *) shift;; esac; done
if [[ $c == 64 && $counted == 0 ]]; then echo "Pass [1] throughput: 30000 infer/sec."; sleep 30; fi
echo "$HEADER" > "$f"
echo "$c,$((1000 * c)),5,90,20,10,300,15,2,$((500 + 10 * c)),600,650,$((700 + 10 * c)),560,1,480" >> "$f"
"""


def test_a_point_that_does_not_finish_is_measured_again_by_request_count(tmp_path, monkeypatch):
    _stand_in(tmp_path, monkeypatch, f'HEADER="{HEADER}"\n' + HANGS_IN_WINDOWS)
    monkeypatch.setattr(perf_analyzer.subprocess, "run", _with_timeout(perf_analyzer.subprocess.run, 2))
    logged, logs = [], tmp_path / "logs"
    logs.mkdir()
    points = perf_analyzer.run_points("127.0.0.1:8001", "fusedops", [1, 64], log=logged.append, log_dir=logs)
    assert [p.get("mode") for p in points] == ["windows", "request_count"]
    assert points[1]["p50_ms"] == 1.14 and "error" not in points[1]
    assert any("did not finish" in line and "Pass [1] throughput" in line for line in logged)
    counted = (logs / "perf_analyzer_c64_request_count.log").read_text()
    assert f"--request-count {perf_analyzer.requests_for(64)}" in counted
    assert f"--warmup-request-count {perf_analyzer.requests_for(64) // 10}" in counted
    assert "Pass [1]" in (logs / "perf_analyzer_c64_windows.log").read_text()


def test_a_point_failing_in_every_mode_names_each_failure(tmp_path, monkeypatch):
    _stand_in(tmp_path, monkeypatch, 'echo "connection refused" >&2; exit 3\n')
    (point,) = perf_analyzer.run_points("127.0.0.1:8001", "fusedops", [8], log=lambda _: None)
    assert point["concurrency"] == 8 and "mode" not in point
    for mode in perf_analyzer.MODES:
        assert f"{mode}: perf_analyzer exit 3: connection refused" in point["error"]


def test_an_unknown_mode_is_refused(tmp_path):
    with pytest.raises(FusedopsError, match="mode 'fast' is not one of windows"):
        perf_analyzer.command("pa", "127.0.0.1:9", "m", 1, tmp_path / "o.csv", mode="fast")


def _with_timeout(run, seconds: float):
    """subprocess.run with every timeout cut to ``seconds`` (the stand-in's hang is 30 s, the real limits longer)."""
    def wrapped(*args, **kwargs):
        kwargs["timeout"] = min(kwargs.get("timeout") or seconds, seconds)
        return run(*args, **kwargs)
    return wrapped


def test_client_probe_tool_times_a_real_server_with_the_stand_in(tmp_path, monkeypatch):
    """tools/serve_client_probe.py end to end on the CPU (ORT CPU + library behind the real server), perf_analyzer
    played by the stand-in: the device run cannot fail on a bug CI could have found."""
    pytest.importorskip("pytriton", reason="PyTriton (the serve extra) is not installed: pip install -e '.[serve]'")
    from fusedops import ort as fo_ort  # lazy: only this test needs the native library

    if fo_ort.unavailable_reason() is not None:
        pytest.skip(f"{fo_ort.unavailable_reason()}")
    _stand_in(tmp_path, monkeypatch, f'HEADER="{HEADER}"\n' + WRITES_CSV.replace("[[ $c == 8 ]]", "[[ $c == 9 ]]"))
    out = tmp_path / "probe"
    tool = Path(__file__).resolve().parents[1] / "tools" / "serve_client_probe.py"
    proc = subprocess.run([sys.executable, str(tool), "--out", str(out), "--backend", "ort-cpu", "--configs", "sync",
                           "async", "--concurrency", "1", "8"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((out / "probe.json").read_text())
    assert "on ort-cpu (cpu)" in report["ready_line"] and report["server_exit"] == 0
    for name, mode in (("sync", "request_count"), ("async", "async")):
        points = report["configs"][name]["points"]
        assert [(p["concurrency"], p["mode"]) for p in points] == [(1, mode), (8, mode)]
        assert report["configs"][name]["throughput_c8_over_c1"] == 8.0
        assert (out / name / f"perf_analyzer_c8_{mode}.log").is_file()
    assert "--async" in (out / "async" / "perf_analyzer_c1_async.log").read_text()
