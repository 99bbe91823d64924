"""The load report: loadtest.json (every point, as measured) and loadtest.png (latency percentiles and throughput
against concurrency, one line per batch size), plus a terminal summary."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from fusedops.errors import FusedopsError


def _fmt(v, digits=2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def summary_lines(result: dict) -> list[str]:
    lines = [f"{result['model']} at {result['url']} ({result['protocol']}), reference {result['reference']} "
             f"({result['reference_kind']}, tolerance {result['tolerance']})",
             f"{'conc':>5} {'batch':>5} {'requests':>8} {'ok':>8} {'wrong':>5} {'errors':>6} {'lost':>4} "
             f"{'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'inf/s':>10}"]
    for p in result["points"]:
        lines.append(f"{p['concurrency']:>5} {p['batch']:>5} {p['requests']:>8} {p['ok']:>8} {p['wrong']:>5} "
                     f"{p['errors']:>6} {p['lost']:>4} {_fmt(p['p50_ms']):>8} {_fmt(p['p90_ms']):>8} "
                     f"{_fmt(p['p99_ms']):>8} {_fmt(p['throughput_inf_s'], 1):>10}")
        for problem in p["first_problems"]:
            lines.append(f"      problem: {problem}")
    lines.append("all responses correct, none lost" if result["ok"] else "FAILED: wrong, failed or lost responses")
    return lines


def print_summary(result: dict) -> None:
    print("\n".join(summary_lines(result)))


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def plot(series: dict[str, list[dict]], path: Path, title: str) -> Path:
    """Two panels: p50 (line) with the p90-p99 band, and throughput, against concurrency; one line per label
    (e.g. "fused batch 1", "eager batch 1"). ``series`` maps label -> points of a loadtest result."""
    import matplotlib  # lazy: optional (serve / bench extras), only when a chart is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after matplotlib.use('Agg'), as matplotlib above

    fig, (ax_lat, ax_thr) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, points in series.items():
        pts = sorted((p for p in points if p["p50_ms"] is not None), key=lambda p: p["concurrency"])
        if not pts:
            continue
        conc = [p["concurrency"] for p in pts]
        line, = ax_lat.plot(conc, [p["p50_ms"] for p in pts], marker="o", label=f"{label} p50")
        ax_lat.fill_between(conc, [p["p90_ms"] for p in pts], [p["p99_ms"] for p in pts], alpha=0.2,
                            color=line.get_color(), label=f"{label} p90-p99")
        ax_thr.plot(conc, [p["throughput_inf_s"] for p in pts], marker="o", label=label, color=line.get_color())
    for ax in (ax_lat, ax_thr):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency per request (ms)")
    ax_thr.set_ylabel("throughput (inferences / s)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(result: dict, out_dir: str | Path, stem: str = "loadtest") -> list[Path]:
    """loadtest.json and loadtest.png in ``out_dir`` (which must exist or be creatable)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FusedopsError(f"cannot create report folder {str(out)!r}: {e.strerror}") from None
    json_path = out / f"{stem}.json"
    _atomic_write(json_path, json.dumps(result, indent=1, default=str).encode())
    series = {f"batch {b}": [p for p in result["points"] if p["batch"] == b]
              for b in sorted({p["batch"] for p in result["points"]})}
    png = plot(series, out / f"{stem}.png", f"{result['model']} over {result['protocol']} at {result['url']}")
    return [json_path, png]
