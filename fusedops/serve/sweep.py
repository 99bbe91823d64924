"""The issue's serving sweep, in one run (tools/gpu/device_serve.sh on the GPU machine; a short version runs in CI):

1. the fused model (fused ONNX on the best backend present, or a reference model key) behind `fusedops serve`
   (its default server: tritonserver running the model in its Python-backend stub), loaded over loopback gRPC at
   batch 1 with concurrency 1, 8, 64 (dynamic batching on);
2. the same fused model behind `fusedops serve --server pytriton` (PyTriton's proxy, the earlier path), and eager
   PyTorch (the reference ``Model``) through PyTriton: the baseline a user would have; both for
   ``--compare-durations`` (shorter by default on the GPU script, to fit its time);
3. in-process ``ModelNew`` latency at batch 1, host array in and host array out (the work one request makes the
   server do, without the server), and its device-only time on a GPU;
4. the targets: p50 <= in-process + 0.5 ms, p99 <= 2 x p50 (concurrency 1); throughput at 64 >= 20 x at 1;
   0 lost or wrong responses.

    python -m fusedops.serve.sweep --out DIR [--size bench] [--durations 1:30 8:20 64:60] [--compare-durations ...]

Writes DIR/serve_sweep.json and DIR/serve_sweep.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from fusedops.errors import FusedopsError
from fusedops.exporter_api import export
from fusedops.models.registry import get_entry

from . import perf_analyzer
from .loadtest import LoadOptions, run_loadtest
from .process import start_server
from .repository import DEFAULT_MAX_QUEUE_DELAY_US
from .report import _atomic_write, plot

P50_BUDGET_MS = 0.5
P99_OVER_P50 = 2.0
THROUGHPUT_GAIN = 20.0
MAX_RATE_PER_S = 50_000  # a point's request bound: its duration at this rate (above any measured)


def inprocess_latency(model_key: str, size: str, repeats: int = 200) -> dict:
    """Median latency of ModelNew at batch 1 in this process: numpy in → device → ModelNew → numpy out (wall clock),
    and on a GPU the device time alone (CUDA events)."""
    entry = get_entry(model_key)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.set_float32_matmul_precision("high")
    model = entry.build(size, "ModelNew").to(device).eval()
    rng = np.random.default_rng(7)
    xs = [rng.random((1, *entry.sizes(size).input_shape[1:]), dtype=np.float32) for _ in range(8)]

    def once(k: int) -> None:
        with torch.no_grad():
            model(torch.from_numpy(xs[k % len(xs)]).to(device)).cpu().numpy()

    for k in range(10):
        once(k)
    wall = []
    for k in range(repeats):
        t0 = time.perf_counter()
        once(k)
        wall.append((time.perf_counter() - t0) * 1e3)
    result = {"device": device, "host_to_host_p50_ms": statistics.median(wall),
              "host_to_host_p99_ms": float(np.percentile(wall, 99))}
    if device == "cuda":
        x = torch.from_numpy(xs[0]).to(device)
        times = []
        with torch.no_grad():
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(x)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        result["device_p50_ms"] = statistics.median(times)
        result["gpu"] = torch.cuda.get_device_name()
    return result


def _serve_and_load(source: str, backend: str, model_key: str, size: str, workdir: Path, concurrency: list[int],
                    durations: dict[int, float], tolerance: str, max_queue_delay_us: int,
                    server_kind: str = "auto", client_processes: int = 1, instances: int | None = None,
                    with_perf_analyzer: bool = False) -> dict:
    """One server (``instances`` None: the serve command's default count), loaded at each concurrency in turn."""
    extra = () if instances is None else ("--instances", str(instances))
    server = start_server(source, workdir, "--backend", backend, "--size", size, "--max-batch-size",
                          str(max(concurrency)), "--max-queue-delay-us", str(max_queue_delay_us),
                          "--server", server_kind, *extra)
    try:
        points = []
        for c in concurrency:
            duration = durations.get(c, 10.0)
            # the count bound must not end a point before its duration (2026-11-27, H200: 1 M requests ended
            # a 60 s point at concurrency 64 after ≈ 46 s at 21.8k inf/s)
            r = run_loadtest(LoadOptions(url=server.grpc_url, reference=model_key, size=size, protocol="grpc",
                                         concurrency=[c], batch=[1], duration_s=duration, tolerance=tolerance,
                                         processes=client_processes,
                                         max_requests=max(1_000_000, int(duration * MAX_RATE_PER_S))))
            points += r["points"]
        found = re.search(r"(\d+) model instance", server.ready_line)
        side = {"source": source, "backend": backend, "server": server_kind,
                "instances": int(found.group(1)) if found else 1, "ready_line": server.ready_line, "points": points}
        if with_perf_analyzer:  # the same server, timed again by Triton's C++ client (it checks no values)
            side["perf_analyzer_points"] = perf_analyzer.run_points(server.grpc_url, server.model_name, concurrency,
                                                                   log_dir=workdir.parent / "perf_analyzer")
        return side
    finally:
        rc = server.stop()
        if rc != 0:
            print(f"sweep: server for {backend} exited with {rc}", file=sys.stderr)


def default_client_processes() -> int:
    """Half the machine's cores, at most 8: enough client processes that the client does not cap the throughput
    at concurrency 64 (one sends a few thousand requests/s), leaving the rest to the server. 1 on 2 cores."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def evaluate(fused_points: list[dict], inproc: dict) -> dict:
    by_c = {p["concurrency"]: p for p in fused_points}
    out = {}
    c1 = by_c.get(1)
    if c1 and c1["p50_ms"] is not None:
        ref = inproc["host_to_host_p50_ms"]
        out["p50_c1_vs_inprocess"] = {"p50_ms": c1["p50_ms"], "inprocess_ms": ref, "budget_ms": ref + P50_BUDGET_MS,
                                      "met": c1["p50_ms"] <= ref + P50_BUDGET_MS}
        out["p99_c1_vs_p50"] = {"p99_ms": c1["p99_ms"], "limit_ms": P99_OVER_P50 * c1["p50_ms"],
                                "met": c1["p99_ms"] <= P99_OVER_P50 * c1["p50_ms"]}
    top = by_c.get(max(by_c)) if by_c else None
    if c1 and top and top is not c1 and c1["throughput_inf_s"]:
        gain = top["throughput_inf_s"] / c1["throughput_inf_s"]
        out[f"throughput_c{top['concurrency']}_over_c1"] = {"gain": gain, "target": THROUGHPUT_GAIN,
                                                            "met": gain >= THROUGHPUT_GAIN}
    bad = sum(p["lost"] + p["wrong"] + p["errors"] for p in fused_points)
    out["lost_or_wrong"] = {"count": bad, "met": bad == 0}
    return out


def evaluate_timing(points: list[dict], inproc: dict) -> dict:
    """The timing targets on another client's points (perf_analyzer's: it checks no values and counts nothing lost,
    so correctness stays with the load test's own points)."""
    measured = [dict(p, lost=0, wrong=0, errors=0) for p in points if "error" not in p]
    out = evaluate(measured, inproc) if measured else {}
    out.pop("lost_or_wrong", None)
    return out


def run_sweep(out: Path, model_key: str = "1", size: str = "bench", fused_backend: str = "auto",
              concurrency: list[int] | None = None, durations: dict[int, float] | None = None,
              tolerance: str = "tf32", max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US,
              skip_baseline: bool = False,
              compare_durations: dict[int, float] | None = None, skip_pytriton: bool = False,
              client_processes: int | None = None, compare_instances: int | None = None,
              compare_delay_us: int | None = None, use_perf_analyzer: str = "auto",
              fused_server: str = "auto") -> dict:
    """The fused model behind the default server (its points are judged against the targets), then, unless skipped,
    the same model behind PyTriton's proxy and eager PyTorch behind PyTriton for ``compare_durations`` (default:
    ``durations``); with ``compare_instances`` also the default server with that many model instances at the top
    concurrency; with ``compare_delay_us`` also the default server with that dynamic-batching delay (the same
    concurrencies, ``compare_durations``), so two delays are compared in one run. ``use_perf_analyzer`` ("auto":
    where it runs, "on", "off") times the default server's points a second time with Triton's perf_analyzer.
    ``fused_server``: the fused side's server ("auto": the serve command's default; "tritonserver": the model in the
    Python stub; "native": fusedops' C++ backend, ONNX backends only); the compared sides follow it, except
    PyTriton's."""
    out.mkdir(parents=True, exist_ok=True)
    concurrency = concurrency or [1, 8, 64]
    durations = durations or {1: 30.0, 8: 20.0, 64: 60.0}
    compare_durations = compare_durations or durations
    client_processes = client_processes or default_client_processes()
    onnx_path = out / f"model{model_key}_{size}.onnx"
    if not onnx_path.is_file():
        export(model_key, str(onnx_path), size=size)
    # The fused model: its ONNX on ORT (CUDA EP first) unless a backend that serves model keys was asked for.
    source = model_key if fused_backend in ("torch-cuda",) else str(onnx_path)
    report = {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
              "model": model_key, "size": size, "concurrency": concurrency,
              "durations_s": {str(k): v for k, v in durations.items()}, "max_queue_delay_us": max_queue_delay_us,
              "client_processes": client_processes, "fused_server": fused_server}
    # First, so a machine without the PyTorch ops fails before minutes of load, not after (2026-11-24, H200).
    report["inprocess_modelnew"] = inprocess_latency(model_key, size)
    pa_reason = perf_analyzer.unavailable_reason() if use_perf_analyzer != "off" else "off (--perf-analyzer off)"
    if pa_reason and use_perf_analyzer == "on":
        raise FusedopsError(f"--perf-analyzer on: {pa_reason}")
    report["perf_analyzer"] = pa_reason or perf_analyzer.binary()
    report["fused"] = _serve_and_load(source, fused_backend, model_key, size, out / "fused", concurrency, durations,
                                      tolerance, max_queue_delay_us, fused_server, client_processes=client_processes,
                                      with_perf_analyzer=pa_reason is None)
    if compare_instances is not None:  # the same server with another instance count, at the top concurrency only
        top = max(concurrency)
        report["fused_instances"] = _serve_and_load(
            source, fused_backend, model_key, size, out / "fused_instances", [top], compare_durations, tolerance,
            max_queue_delay_us, fused_server, client_processes=client_processes, instances=compare_instances)
    if compare_delay_us is not None:
        report["fused_delay"] = _serve_and_load(source, fused_backend, model_key, size, out / "fused_delay",
                                                concurrency, compare_durations, tolerance, compare_delay_us,
                                                fused_server, client_processes=client_processes)
        report["fused_delay"]["max_queue_delay_us"] = compare_delay_us
    if not skip_pytriton:
        report["fused_pytriton"] = _serve_and_load(source, fused_backend, model_key, size, out / "fused_pytriton",
                                                   concurrency, compare_durations, tolerance, max_queue_delay_us,
                                                   "pytriton", client_processes)
    if not skip_baseline:
        report["eager_baseline"] = _serve_and_load(model_key, "torch-eager", model_key, size, out / "eager",
                                                   concurrency, compare_durations, tolerance, max_queue_delay_us,
                                                   "pytriton", client_processes)
    report["targets"] = evaluate(report["fused"]["points"], report["inprocess_modelnew"])
    if "perf_analyzer_points" in report["fused"]:
        report["targets_perf_analyzer"] = evaluate_timing(report["fused"]["perf_analyzer_points"],
                                                          report["inprocess_modelnew"])
    _atomic_write(out / "serve_sweep.json", json.dumps(report, indent=1, default=str).encode())
    series = {f"fused ({report['fused']['ready_line'].split(' on ')[-1].split(',')[0]})": report["fused"]["points"]}
    if "fused_instances" in report:
        series[f"fused, {compare_instances} instances"] = report["fused_instances"]["points"]
    if "fused_delay" in report:
        series[f"fused, max queue delay {compare_delay_us} us"] = report["fused_delay"]["points"]
    if "fused_pytriton" in report:
        series["fused via PyTriton's proxy"] = report["fused_pytriton"]["points"]
    if "eager_baseline" in report:
        series["eager PyTorch (PyTriton)"] = report["eager_baseline"]["points"]
    pa_points = [p for p in report["fused"].get("perf_analyzer_points", []) if "error" not in p]
    if pa_points:
        series["fused, timed by perf_analyzer"] = pa_points
    plot(series, out / "serve_sweep.png", f"model {model_key} ({size}) over loopback gRPC, batch 1; in-process "
                                          f"ModelNew {report['inprocess_modelnew']['host_to_host_p50_ms']:.3f} ms")
    return report


def summary(report: dict) -> str:
    """One line per side and concurrency: p50 / p99 ms, inferences/s, and what was not right."""
    lines = [f"model {report['model']} ({report['size']}), batch 1, loopback gRPC; in-process ModelNew "
             f"{report['inprocess_modelnew']['host_to_host_p50_ms']:.3f} ms"]
    for side in ("fused", "fused_instances", "fused_delay", "fused_pytriton", "eager_baseline"):
        if side not in report:
            continue
        label = f"{side}: {report[side]['ready_line'].split(' on ')[-1].split(',')[0]}"
        if side == "fused_delay":
            label += f" delay {report[side]['max_queue_delay_us']} us"
        if report[side].get("instances", 1) > 1:
            label += f" x{report[side]['instances']}"
        for p in report[side]["points"]:
            p50, p99 = (f"{p[k]:.3f}" if p[k] is not None else "-" for k in ("p50_ms", "p99_ms"))
            lines.append(f"  {label:48s} c={p['concurrency']:<3d} p50 {p50} p99 {p99} ms  "
                         f"{p['throughput_inf_s'] or 0:8.1f} inf/s  ok {p['ok']} wrong {p['wrong']} "
                         f"errors {p['errors']} lost {p['lost']}")
    for p in report.get("fused", {}).get("perf_analyzer_points", []):
        label = "fused: the same server, timed by perf_analyzer"
        if "error" in p:
            lines.append(f"  {label:48s} c={p['concurrency']:<3d} {p['error']}")
            continue
        q = p.get("breakdown_ms", {})
        lines.append(f"  {label:48s} c={p['concurrency']:<3d} p50 {p['p50_ms']:.3f} p99 {p['p99_ms']:.3f} ms  "
                     f"{p['throughput_inf_s']:8.1f} inf/s  (server queue {q.get('server_queue', 0):.3f}, "
                     f"compute {q.get('server_compute_infer', 0):.3f} ms; {p.get('mode', 'windows')})")
    return "\n".join(lines)


def _parse_durations(items: list[str]) -> dict[int, float]:
    out = {}
    for item in items:
        c, _, d = item.partition(":")
        if not c.isdigit() or not d:
            raise FusedopsError(f"--durations wants CONCURRENCY:SECONDS items, got {item!r}")
        out[int(c)] = float(d)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedops.serve.sweep", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="1")
    p.add_argument("--size", choices=["small", "bench"], default="bench")
    p.add_argument("--backend", default="auto", help="backend of the fused side (auto, ort-cuda, torch-cuda, ...)")
    p.add_argument("--durations", nargs="+", default=["1:30", "8:20", "64:60"], help="CONCURRENCY:SECONDS ...")
    p.add_argument("--tolerance", choices=["fp32", "tf32"], default="tf32")
    p.add_argument("--max-queue-delay-us", type=int, default=DEFAULT_MAX_QUEUE_DELAY_US)
    p.add_argument("--compare-durations", nargs="+", default=None,
                   help="CONCURRENCY:SECONDS for the PyTriton sides (fused and eager); default --durations")
    p.add_argument("--client-processes", type=int, default=None,
                   help="load-test client processes (default: half the cores, at most 8)")
    p.add_argument("--compare-instances", type=int, default=None,
                   help="also the default server with N model instances, at the top concurrency only")
    p.add_argument("--compare-delay-us", type=int, default=None,
                   help="also the default server with this --max-queue-delay-us (both delays in one run)")
    p.add_argument("--skip-baseline", action="store_true", help="no eager PyTorch side")
    p.add_argument("--skip-pytriton", action="store_true", help="no fused side behind PyTriton's proxy")
    p.add_argument("--fused-server", choices=["auto", "tritonserver", "native"], default="auto",
                   help="the fused side's server: the serve command's default (auto), the model in the Python "
                        "stub, or fusedops' C++ backend (ONNX)")
    p.add_argument("--perf-analyzer", choices=["auto", "on", "off"], default="auto",
                   help="also time the default server with Triton's perf_analyzer (auto: where it runs)")
    a = p.parse_args(argv)
    try:
        durations = _parse_durations(a.durations)
        compare = _parse_durations(a.compare_durations) if a.compare_durations else None
        if a.compare_delay_us is not None and (a.compare_delay_us < 0 or a.compare_delay_us == a.max_queue_delay_us):
            raise FusedopsError(f"--compare-delay-us must be >= 0 and differ from --max-queue-delay-us "
                                f"({a.max_queue_delay_us}), got {a.compare_delay_us}")
        if compare and sorted(compare) != sorted(durations):
            raise FusedopsError(f"--compare-durations names concurrencies {sorted(compare)}, --durations "
                                f"{sorted(durations)}; give the same")
        report = run_sweep(Path(a.out), a.model, a.size, a.backend, sorted(durations), durations, a.tolerance,
                           a.max_queue_delay_us, a.skip_baseline, compare, a.skip_pytriton, a.client_processes,
                           a.compare_instances, a.compare_delay_us, a.perf_analyzer, a.fused_server)
    except FusedopsError as e:
        print(f"sweep: error: {e}", file=sys.stderr)
        return 2
    print(summary(report))
    print(json.dumps(report["targets"], indent=1))
    if "targets_perf_analyzer" in report:
        print("timed by perf_analyzer:", json.dumps(report["targets_perf_analyzer"], indent=1))
    return 0 if all(t["met"] for t in report["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
