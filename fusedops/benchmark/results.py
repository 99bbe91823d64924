"""The bench report: rows, targets (what is judged), the ratios between rows and the printed table."""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

RESULTS_ROOT = Path("bench") / "results"  # relative to the working directory: the repository's bench/results/

GEMM_FLOOR_RATIO_TARGET = 1.05  # models 1-3: fused ≤ 1.05 × the GEMM alone at the same precision
GN_STEP_TARGET_MS = 1.7  # model 4: fused GELU+GroupNorm step
CONV_PLUS_TARGET_MS = 1.8  # model 4: whole fused model ≤ ConvTranspose2d alone + 1.8 ms
ORT_VS_UNFUSED_TARGET = 2.0  # models 1-3, TF32: ORT CUDA EP fused + library ≥ 2× faster than the unfused graph
ORT_VS_TORCH_TARGET = 1.1  # models 1-3, TF32: ORT CUDA EP fused + library within 1.1× of the fused PyTorch path


@dataclass
class Row:
    model: str
    variant: str  # eager | compile | floor | fused | gn_step_eager | gn_step_compile | gn_step_fused | ort:...
    precision: str  # fp32 | tf32 | bf16
    median_ms: float
    min_ms: float
    max_ms: float
    peak_extra_mb: float  # device memory allocated beyond what existed before the timed runs
    output_mb: float
    vs_floor: float | None = None
    vs_eager: float | None = None
    vs_compile: float | None = None
    max_abs_diff_vs_eager: float | None = None
    note: str = ""


@dataclass
class Target:
    model: str
    what: str
    value: float
    limit: float
    unit: str
    met: bool


@dataclass
class BenchReport:
    date: str
    gpu: str
    torch: str
    cuda: str | None
    size: str
    repeats: int
    warmup: int
    input_sets: int
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)  # fusedops.provenance: versions, date, device


def _runtime_row(model: str, r, prefix: str = "ort") -> Row:
    """A row of ort_rows.ort_rows / trt_rows.trt_rows ({"backend", "precision", "median_ms",
    ...}) as a bench Row named ``<prefix>:<backend>``."""
    if isinstance(r, Row):
        return r
    med = float(r["median_ms"])
    note = ", ".join(f"{k}={r[k]}" for k in ("batch", "runs") if r.get(k) is not None)
    return Row(model, f"{prefix}:{r.get('backend') or r.get('variant')}", str(r.get("precision", "")), round(med, 4),
               round(float(r.get("min_ms", med)), 4), round(float(r.get("max_ms", med)), 4),
               float(r.get("peak_extra_mb") or 0.0), float(r.get("output_mb") or 0.0), note=note)


def _fill_ratios(rows: list[Row]) -> None:
    def find(model, variant, p):
        for r in rows:
            if (r.model, r.variant, r.precision) == (model, variant, p):
                return r.median_ms
        return None

    for r in rows:
        if r.variant.startswith("ort:"):
            continue
        step = r.variant.startswith("gn_step")
        floor = find(r.model, "floor", r.precision)
        eager = find(r.model, "gn_step_eager" if step else "eager", r.precision)
        comp = find(r.model, "gn_step_compile" if step else "compile", r.precision)
        if floor and not step:
            r.vs_floor = round(r.median_ms / floor, 3)
        if eager:
            r.vs_eager = round(r.median_ms / eager, 3)
        if comp:
            r.vs_compile = round(r.median_ms / comp, 3)


def _targets(rows: list[Row]) -> list[Target]:
    out: list[Target] = []
    by = {(r.model, r.variant, r.precision): r for r in rows}
    for (model, variant, p), r in by.items():
        if variant == "fused" and not model.startswith("convtranspose") and r.vs_floor is not None:
            out.append(Target(model, f"fused / GEMM alone ({p})", r.vs_floor, GEMM_FLOOR_RATIO_TARGET, "x",
                              r.vs_floor <= GEMM_FLOOR_RATIO_TARGET))
        if variant == "gn_step_fused":
            out.append(Target(model, f"GELU+GroupNorm step ({p})", r.median_ms, GN_STEP_TARGET_MS, "ms",
                              r.median_ms <= GN_STEP_TARGET_MS))
        if variant == "fused" and model.startswith("convtranspose") and (model, "floor", p) in by:
            extra = r.median_ms - by[(model, "floor", p)].median_ms
            out.append(Target(model, f"whole model - conv alone ({p})", round(extra, 4), CONV_PLUS_TARGET_MS, "ms",
                              extra <= CONV_PLUS_TARGET_MS))
        if variant == "ort:ort-cuda-fused" and not model.startswith("convtranspose"):
            unfused, torch_fused = by.get((model, "ort:ort-cuda-unfused", p)), by.get((model, "fused", p))
            if unfused is not None and p == "tf32":
                speedup = round(unfused.median_ms / r.median_ms, 3)
                out.append(Target(model, f"ORT unfused / ORT fused ({p})", speedup, ORT_VS_UNFUSED_TARGET, "x",
                                  speedup >= ORT_VS_UNFUSED_TARGET))
            if torch_fused is not None and p == "tf32":
                ratio = round(r.median_ms / torch_fused.median_ms, 3)
                out.append(Target(model, f"ORT fused / PyTorch fused ({p})", ratio, ORT_VS_TORCH_TARGET, "x",
                                  ratio <= ORT_VS_TORCH_TARGET))
        if variant in ("fused", "gn_step_fused"):
            # No intermediate of the output's size: peak extra memory stays under twice the output.
            limit = 2 * r.output_mb
            if variant == "fused" and model.startswith("convtranspose"):
                limit = 3 * r.output_mb  # the convolution's own output is one output-sized tensor
            out.append(Target(model, f"{variant} peak extra memory ({p})", r.peak_extra_mb, limit, "MiB",
                              r.peak_extra_mb < limit))
    return out



def _fmt(v: float | None, digits: int = 3) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def print_table(report: BenchReport) -> None:
    t = Table(title=f"fusedops bench — {report.gpu}, torch {report.torch}, {report.date}")
    for col in ("model", "variant", "prec", "median ms", "×floor", "×eager", "×compile", "peak extra MiB",
                "out MiB", "max|Δ| vs eager"):
        t.add_column(col, justify="left" if col in ("model", "variant", "prec") else "right")
    for r in report.rows:
        t.add_row(r.model, r.variant, r.precision, _fmt(r.median_ms, 4), _fmt(r.vs_floor), _fmt(r.vs_eager),
                  _fmt(r.vs_compile), _fmt(r.peak_extra_mb, 1), _fmt(r.output_mb, 1),
                  "" if r.max_abs_diff_vs_eager is None else f"{r.max_abs_diff_vs_eager:.2e}")
    c = Console(width=160)
    c.print(t)
    tt = Table(title="targets")
    for col in ("model", "what", "value", "limit", "met"):
        tt.add_column(col)
    for g in report.targets:
        tt.add_row(g.model, g.what, f"{g.value:.3f} {g.unit}", f"{g.limit:.3f} {g.unit}", "yes" if g.met else "NO")
    c.print(tt)
    for e in report.errors:
        c.print(f"[red]error:[/red] {e}")



def _json_default(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


def results_dir(kind: str, now: _dt.datetime | None = None) -> Path:
    """Default folder of one run: ``bench/results/<UTC time>-<kind>``, new for every run so none replaces another."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return RESULTS_ROOT / f"{now.strftime('%Y%m%d-%H%M%S')}-{kind}"
