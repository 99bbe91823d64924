"""Charts of ``fusedops bench`` and ``fusedops bench --latency`` that show what is judged: each time as a ratio to
the row it is judged against (the GEMM / convolution floor, or eager PyTorch for latency), the target as a labelled
line, a legend, and labels readable at the saved size.

``plot_bench`` / ``plot_latency`` return the matplotlib Figure (tests inspect its artists); ``save_figure`` writes
and closes it. matplotlib is optional (the ``bench`` extra): without it the functions return None.
"""

from __future__ import annotations

import io
from pathlib import Path

from .results import CONV_PLUS_TARGET_MS, GEMM_FLOOR_RATIO_TARGET, GN_STEP_TARGET_MS

VARIANT_COLORS = {"eager": "#8c8c8c", "compile": "#4c72b0", "fused": "#dd8452", "fused_graph": "#c44e52",
                  "fused_op": "#937860", "ort": "#55a868", "trt": "#8172b3",
                  # --latency's ORT rows: one green each, darker for the configurations closer to the GPU
                  "ort-cuda-unfused": "#a6d8b0", "ort-cuda-fused": "#55a868", "ort-cuda-fused-graph": "#2d6a3e"}
TARGET_COLOR = "#d62728"
FONT = 9


def _pyplot():
    try:  # lazy: optional dependency (bench / test extras); imported here so the bench runs without it
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: after matplotlib.use('Agg'), as matplotlib above
    except ImportError:
        return None
    return plt


def _family(variant: str) -> str:
    """Colour family of a row: ort:* and trt:* rows share one colour each; gn_step_* rows map to their base."""
    base = variant.split(":", 1)[0]
    return base.replace("gn_step_", "") if base.startswith("gn_step_") else base


def _label(variant: str) -> str:
    if variant == "fused_graph":
        return "fused, CUDA graph replay"
    return variant.replace("gn_step_", "").replace("ort:ort-", "ORT ").replace("trt:", "TRT ")


def _grouped_bars(ax, groups: list[str], series: dict[str, dict[str, float]]) -> None:
    """Bars of ``series[variant][group]`` grouped by ``groups`` on x, one colour per variant family, value on top."""
    names = list(series)
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        xs = [i + (k - (len(names) - 1) / 2) * width for i, g in enumerate(groups) if g in series[name]]
        ys = [series[name][g] for g in groups if g in series[name]]
        bars = ax.bar(xs, ys, width * 0.95, color=VARIANT_COLORS.get(_family(name), "#999999"),
                      alpha=1.0 if _family(name) == name else 0.7, label=_label(name))
        ax.bar_label(bars, [f"{y:.2f}" for y in ys], fontsize=FONT - 2, padding=1)
    ax.set_xticks(range(len(groups)), groups, fontsize=FONT)
    ax.tick_params(axis="y", labelsize=FONT)


def _target_line(ax, y: float, label: str, x0: float | None = None, x1: float | None = None) -> None:
    if x0 is None:
        ax.axhline(y, color=TARGET_COLOR, linestyle="--", linewidth=1.2, label=label)
    else:
        ax.hlines(y, x0, x1, colors=TARGET_COLOR, linestyles="--", linewidth=1.2, label=label)


def plot_bench(report):
    """One panel per model: every variant's median time / the floor (x @ W.T or ConvTranspose2d alone) at the same
    precision, target line(s); model 4 gets a second panel for the GELU+GroupNorm step in ms against its target."""
    plt = _pyplot()
    if plt is None or not report.rows:
        return None
    models = list(dict.fromkeys(r.model for r in report.rows))
    panels = [(m, "ratio") for m in models]
    panels += [(m, "step") for m in models if any(r.variant.startswith("gn_step") for r in report.rows
                                                  if r.model == m)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.8 * len(panels)), squeeze=False)
    for ax, (model, kind) in zip(axes[:, 0], panels):
        rows = [r for r in report.rows if r.model == model]
        precisions = list(dict.fromkeys(r.precision for r in rows if r.variant == "floor")) or \
            list(dict.fromkeys(r.precision for r in rows))
        floors = {r.precision: r.median_ms for r in rows if r.variant == "floor"}
        series: dict[str, dict[str, float]] = {}
        if kind == "ratio":
            for r in rows:
                if r.variant != "floor" and not r.variant.startswith("gn_step") and floors.get(r.precision):
                    series.setdefault(r.variant, {})[r.precision] = r.median_ms / floors[r.precision]
            _grouped_bars(ax, precisions, series)
            ax.axhline(1.0, color="black", linewidth=0.8)
            if model.startswith("convtranspose"):
                for i, p in enumerate(precisions):  # whole model <= conv alone + 1.8 ms: a ratio per precision
                    if floors.get(p):
                        _target_line(ax, (floors[p] + CONV_PLUS_TARGET_MS) / floors[p],
                                     f"target: fused <= floor + {CONV_PLUS_TARGET_MS} ms" if i == 0 else None,
                                     i - 0.45, i + 0.45)
            else:
                _target_line(ax, GEMM_FLOOR_RATIO_TARGET, f"target: fused <= {GEMM_FLOOR_RATIO_TARGET} x floor")
            floor_note = next((r.note for r in rows if r.variant == "floor"), "the floor")
            ax.set_ylabel("time / floor (same precision)", fontsize=FONT)
            ax.set_title(f"{model}: median time relative to {floor_note} (1.0 = the floor)", fontsize=FONT + 1)
        else:
            for r in rows:
                if r.variant.startswith("gn_step"):
                    series.setdefault(r.variant, {})[r.precision] = r.median_ms
            _grouped_bars(ax, precisions, series)
            _target_line(ax, GN_STEP_TARGET_MS, f"target: fused step <= {GN_STEP_TARGET_MS} ms")
            ax.set_ylabel("median ms", fontsize=FONT)
            ax.set_title(f"{model}: GELU+GroupNorm step alone", fontsize=FONT + 1)
        ax.set_xlabel("precision", fontsize=FONT)
        ax.legend(fontsize=FONT - 1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(f"fusedops bench: {report.gpu}, torch {report.torch}, {report.date}", fontsize=FONT + 2)
    fig.tight_layout()
    return fig


def plot_latency(report, batch1_target: float):
    """One panel per (model, batch): every variant's synchronous per-call time / eager's at the same precision and
    batch (``fused_graph``: ModelNew's CUDA graph replayed synchronously); at batch 1 the target line (fused <=
    ``batch1_target`` x eager)."""
    plt = _pyplot()
    if plt is None or not report.rows:
        return None
    panels = list(dict.fromkeys((r.model, r.batch) for r in report.rows))
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.8 * len(panels)), squeeze=False)
    for ax, (model, batch) in zip(axes[:, 0], panels):
        rows = [r for r in report.rows if (r.model, r.batch) == (model, batch)]
        precisions = list(dict.fromkeys(r.precision for r in rows))
        eager = {r.precision: r.sync_ms for r in rows if r.variant == "eager"}
        series: dict[str, dict[str, float]] = {}
        for r in rows:
            if r.variant not in ("eager", "host_yardstick") and eager.get(r.precision):
                series.setdefault(r.variant, {})[r.precision] = r.sync_ms / eager[r.precision]
            if r.variant == "fused" and getattr(r, "graph_sync_ms", None) and eager.get(r.precision):
                # the floor of a synchronous caller: ModelNew's CUDA graph replayed and waited for
                series.setdefault("fused_graph", {})[r.precision] = r.graph_sync_ms / eager[r.precision]
        _grouped_bars(ax, precisions, series)
        ax.axhline(1.0, color="black", linewidth=0.8)
        if batch == 1:
            _target_line(ax, batch1_target, f"target: fused <= {batch1_target} x eager")
        ax.set_ylabel("sync time / eager", fontsize=FONT)
        ax.set_xlabel("precision", fontsize=FONT)
        ax.set_title(f"{model}, batch {batch}: synchronous time per call relative to eager (1.0 = eager)",
                     fontsize=FONT + 1)
        ax.legend(fontsize=FONT - 1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(f"fusedops bench --latency: {report.gpu}, torch {report.torch}, {report.date}", fontsize=FONT + 2)
    fig.tight_layout(rect=(0, 0, 1, 0.985))  # room for the suptitle above the first panel
    return fig


def save_figure(fig, path: str | Path | io.BytesIO) -> bool:
    """Write the figure as PNG and close it; False when there is none (no matplotlib, no rows)."""
    if fig is None:
        return False
    try:
        fig.savefig(path, dpi=110, format="png", bbox_inches="tight")
    finally:
        _pyplot().close(fig)
    return True
