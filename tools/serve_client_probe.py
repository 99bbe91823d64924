"""How the serving targets depend on the client: one `fusedops serve` (model 1 at bench size, the default server),
timed by perf_analyzer in several client configurations at concurrency 1 and 64 (issue 9).

    python3 tools/serve_client_probe.py --out $OUT/probe [--backend ort-cuda]

The sweep's perf_analyzer points use one synchronous thread per request in flight; on a 16-core machine shared with
the server, 64 of them compete with the server for the cores (2026-11-27 08:57, H200: 13.1k inf/s at c = 64 against
22.4k with the sweep's 8 Python client processes, the server's compute 2.7 ms a request instead of 0.25). Each
configuration here is a fixed request count (perf_analyzer's time windows did not finish at c = 64):
  sync          one thread per request in flight (perf_analyzer's default)
  async         perf_analyzer's asynchronous client (a few threads, completion queues)
  sync-shm      sync, inputs and outputs in system shared memory (what a client on the server's host can use:
                gRPC then carries only the region's name, not 32 KB of tensor each way)
  async-shm     async with system shared memory
Writes probe.json (every point, the c64 / c1 ratio of each configuration) and one log per perf_analyzer run.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from fusedops.exporter_api import export
from fusedops.serve import perf_analyzer
from fusedops.serve.process import start_server
from fusedops.serve.sweep import inprocess_latency

CONFIGS = {"sync": ("request_count", ()), "async": ("async", ()),
           "sync-shm": ("request_count", ("--shared-memory", "system")),
           "async-shm": ("async", ("--shared-memory", "system"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for probe.json and the perf_analyzer logs")
    ap.add_argument("--backend", default="ort-cuda")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    a = ap.parse_args(argv)
    why = perf_analyzer.unavailable_reason()
    if why:
        print(f"serve_client_probe: {why}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    onnx_path = out / "model1_bench.onnx"
    export("1", str(onnx_path), size="bench")
    report = {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "backend": a.backend,
              "inprocess_modelnew": inprocess_latency("1", "bench"), "configs": {}}
    server = start_server(str(onnx_path), out / "server", "--backend", a.backend, "--size", "bench",
                          "--max-batch-size", str(max(a.concurrency)), "--max-queue-delay-us", "0")
    try:
        report["ready_line"] = server.ready_line
        for name in a.configs:
            mode, extra = CONFIGS[name]
            logs = out / name
            logs.mkdir(exist_ok=True)
            points = perf_analyzer.run_points(server.grpc_url, server.model_name, a.concurrency, log_dir=logs,
                                              modes=(mode,), extra_args=extra,
                                              log=lambda text, name=name: print(f"[{name}] {text}", flush=True))
            by_c = {p["concurrency"]: p for p in points if "error" not in p}
            lo, hi = min(a.concurrency), max(a.concurrency)
            gain = (by_c[hi]["throughput_inf_s"] / by_c[lo]["throughput_inf_s"]
                    if lo in by_c and hi in by_c and by_c[lo]["throughput_inf_s"] else None)
            report["configs"][name] = {"points": points, f"throughput_c{hi}_over_c{lo}": gain}
    finally:
        report["server_exit"] = server.stop()
    (out / "probe.json").write_text(json.dumps(report, indent=1))
    inproc = report["inprocess_modelnew"].get("host_to_host_p50_ms")
    print(f"in-process ModelNew {inproc} ms; p50 budget {inproc + 0.5 if inproc else '-'} ms")
    for name, r in report["configs"].items():
        cells = []
        for p in r["points"]:
            cells.append(f"c={p['concurrency']} " + (p["error"][:80] if "error" in p else
                                                     f"p50 {p['p50_ms']:.3f} p99 {p['p99_ms']:.3f} ms "
                                                     f"{p['throughput_inf_s']:.0f} inf/s"))
        gain = next((v for k, v in r.items() if k.startswith("throughput_")), None)
        print(f"{name:10s} " + " | ".join(cells) + (f" | gain {gain:.1f}x" if gain else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
