"""``fusedops bench``: GPU timings of the fused drop-in models against eager PyTorch, torch.compile and the floor.

For each model and precision (strict FP32, TF32, BF16) it times:
  eager      Model at that precision
  compile    torch.compile(Model) at that precision
  floor      the one library call every implementation must make: ``x @ W.T`` (models 1-3; cuBLAS) or
             ``conv_transpose`` (model 4; cuDNN), at that precision
  fused      ModelNew (the fusedops kernels) at that precision
and for model 4 also the GELU+GroupNorm step alone (eager, compile, fused) on a precomputed convolution output.
``fused_graph`` rows replay the fused model captured in a CUDA graph: its GPU time without host launch overhead.
Targets are judged on the plain (non-graph) rows: that is what a caller gets without graphs.

Timing: median of ``repeats`` CUDA-event timings after ``warmup`` calls, rotating among ``input_sets`` (≥ 3) inputs
so no run finds its input in L2 from the previous one. Memory: peak device memory allocated during the timed runs
minus what was allocated before them (inputs and weights excluded; the outputs included), next to the output's size.
Every fused row also records its largest difference to eager PyTorch at the same precision, as a sanity check.

Writes ``bench.json`` and ``bench.png`` (bar chart) into ``out_dir`` and prints a table.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import io
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from . import safe_output
from .errors import FusedopsError

PRECISIONS = ("fp32", "tf32", "bf16")
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


# ---------------------------------------------------------------------------------------------------------------------
# Precision and timing
# ---------------------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def precision_mode(p: str):
    """fp32: strict FP32 GEMMs and convolutions; tf32 / bf16: TF32 allowed for any float32 leftover."""
    if p not in PRECISIONS:
        raise FusedopsError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
    old_mm, old_cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("highest" if p == "fp32" else "high")
        torch.backends.cudnn.allow_tf32 = p != "fp32"
        yield
    finally:
        torch.set_float32_matmul_precision(old_mm)
        torch.backends.cudnn.allow_tf32 = old_cudnn


def dtype_of(p: str) -> torch.dtype:
    return torch.bfloat16 if p == "bf16" else torch.float32


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    peak_extra_bytes: int
    output_bytes: int


def time_cuda(fn: Callable[[torch.Tensor], torch.Tensor], inputs: Sequence[torch.Tensor], repeats: int,
              warmup: int) -> Timing:
    """Median CUDA-event time of fn(inputs[i % len(inputs)]); peak memory beyond the state before the timed runs."""
    with torch.no_grad():
        for i in range(warmup):
            out = fn(inputs[i % len(inputs)])
        del out
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        events = []
        out_bytes = 0
        for i in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(inputs[i % len(inputs)])
            end.record()
            out_bytes = out.numel() * out.element_size()
            del out  # freed stream-ordered: the next run may reuse it, as a real caller's would
            events.append((start, end))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    times = [s.elapsed_time(e) for s, e in events]
    return Timing(statistics.median(times), min(times), max(times), peak, out_bytes)


def time_cuda_graph(fn: Callable[[torch.Tensor], torch.Tensor], inputs: Sequence[torch.Tensor], repeats: int,
                    warmup: int) -> Timing:
    """Like time_cuda, but each input's call is captured once in a CUDA graph and replayed: GPU time without the
    host's launch overhead (Python, dispatch, ctypes). Peak memory is not measured here (0)."""
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for x in inputs:
                fn(x)  # warm-up outside capture: library load, handles, algorithm choice, compilation
        torch.cuda.current_stream().wait_stream(side)
        pool = torch.cuda.graph_pool_handle()
        graphs, outs = [], []
        for x in inputs:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                outs.append(fn(x))
            graphs.append(g)
        for i in range(warmup):
            graphs[i % len(graphs)].replay()
        events = []
        for i in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[i % len(graphs)].replay()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        out_bytes = outs[0].numel() * outs[0].element_size()
        del graphs, outs
    times = [s.elapsed_time(e) for s, e in events]
    return Timing(statistics.median(times), min(times), max(times), 0, out_bytes)


def _row(model: str, variant: str, p: str, t: Timing, note: str = "") -> Row:
    return Row(model, variant, p, round(t.median_ms, 4), round(t.min_ms, 4), round(t.max_ms, 4),
               round(t.peak_extra_bytes / 2**20, 1), round(t.output_bytes / 2**20, 1), note=note)


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max().item())


# ---------------------------------------------------------------------------------------------------------------------
# One model
# ---------------------------------------------------------------------------------------------------------------------

def _first_linear(model: torch.nn.Module) -> torch.nn.Linear:
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            return m
    raise FusedopsError(f"{type(model).__name__} has no nn.Linear")


def _bench_model(entry, size: str, precisions: Sequence[str], repeats: int, warmup: int, input_sets: int,
                 use_compile: bool, compile_mode: str | None, compile_precisions: tuple[str, ...], rows: list[Row],
                 log: Callable[[str], None], use_graphs: bool = True) -> None:
    from fusedops.plugins import torch_ops

    dev = torch.device("cuda")
    name = entry.key
    ref = entry.build(size).to(dev)
    new = entry.build(size, cls_name="ModelNew").to(dev)
    new.load_state_dict(ref.state_dict())
    gen = torch.Generator().manual_seed(20261122)
    base_inputs = [entry.inputs(size, generator=gen, device=dev)[0] for _ in range(input_sets)]

    for p in precisions:
        dt = dtype_of(p)
        # Copies, so the float32 masters stay exact whatever the order of precisions.
        ref_p, new_p = copy.deepcopy(ref).to(dt), copy.deepcopy(new).to(dt)
        xs = [x.to(dt) for x in base_inputs]
        with precision_mode(p):
            log(f"{name} {p}: eager")
            rows.append(_row(name, "eager", p, time_cuda(ref_p, xs, repeats, warmup)))
            with torch.no_grad():
                eager_out = ref_p(xs[0])

            if entry.number == 4:
                conv = ref_p.conv_transpose
                floor_fn, floor_note = conv, "ConvTranspose2d alone (cuDNN)"
            else:
                w = _first_linear(ref_p).weight
                floor_fn, floor_note = (lambda x, w=w: x @ w.T), "x @ W.T alone (cuBLAS)"
            log(f"{name} {p}: floor")
            rows.append(_row(name, "floor", p, time_cuda(floor_fn, xs, repeats, warmup), floor_note))

            compile_here = use_compile and p in compile_precisions
            if compile_here:
                log(f"{name} {p}: torch.compile")
                torch._dynamo.reset()
                compiled = torch.compile(ref_p, mode=compile_mode)
                rows.append(_row(name, "compile", p, time_cuda(compiled, xs, repeats, warmup),
                                 f"mode={compile_mode or 'default'}"))
                del compiled

            log(f"{name} {p}: fused")
            fused_row = _row(name, "fused", p, time_cuda(new_p, xs, repeats, warmup))
            with torch.no_grad():
                fused_row.max_abs_diff_vs_eager = round(_max_abs_diff(new_p(xs[0]), eager_out), 6)
            rows.append(fused_row)
            del eager_out
            if use_graphs:
                log(f"{name} {p}: fused in a CUDA graph")
                rows.append(_row(name, "fused_graph", p, time_cuda_graph(new_p, xs, repeats, warmup),
                                 "CUDA graph replay: no host launch overhead"))

            if entry.number == 4:
                gn = ref_p.group_norm
                with torch.no_grad():
                    ys = [ref_p.conv_transpose(x) for x in xs]

                def eager_step(y, gn=gn):
                    return F.group_norm(F.gelu(y), gn.num_groups, gn.weight, gn.bias, gn.eps)

                def fused_step(y, gn=gn):
                    return torch_ops.group_norm_act(y, gn.weight, gn.bias, [], gn.num_groups, gn.eps, "gelu")

                log(f"{name} {p}: GELU+GroupNorm step")
                rows.append(_row(name, "gn_step_eager", p, time_cuda(eager_step, ys, repeats, warmup)))
                if compile_here:
                    torch._dynamo.reset()
                    compiled_step = torch.compile(eager_step, mode=compile_mode)
                    rows.append(_row(name, "gn_step_compile", p, time_cuda(compiled_step, ys, repeats, warmup)))
                step_row = _row(name, "gn_step_fused", p, time_cuda(fused_step, ys, repeats, warmup))
                with torch.no_grad():
                    step_row.max_abs_diff_vs_eager = round(_max_abs_diff(fused_step(ys[0]), eager_step(ys[0])), 6)
                rows.append(step_row)
                if use_graphs:
                    rows.append(_row(name, "gn_step_fused_graph", p, time_cuda_graph(fused_step, ys, repeats, warmup),
                                     "CUDA graph replay"))
                del ys
        del xs, ref_p, new_p
        torch.cuda.empty_cache()
    del ref, new, base_inputs
    torch.cuda.empty_cache()


def _runtime_row(model: str, r, prefix: str = "ort") -> Row:
    """A row of fusedops.ort_bench.ort_rows / fusedops.trt_bench.trt_rows ({"backend", "precision", "median_ms",
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


# ---------------------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------------------

def _fmt(v: float | None, digits: int = 3) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def print_table(report: BenchReport) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is a dependency, but the numbers matter more than the formatting
        for r in report.rows:
            print(asdict(r))
        return
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


def plot(report: BenchReport, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    models = list(dict.fromkeys(r.model for r in report.rows))
    fig, axes = plt.subplots(len(models), 1, figsize=(12, 3.2 * len(models)), squeeze=False)
    colors = {"fp32": "#4c72b0", "tf32": "#dd8452", "bf16": "#55a868"}
    for ax, model in zip(axes[:, 0], models):
        rs = [r for r in report.rows if r.model == model]
        labels = [f"{r.variant.replace('gn_step_', 'step ')}\n{r.precision}" for r in rs]
        ax.bar(range(len(rs)), [r.median_ms for r in rs], color=[colors.get(r.precision, "#888") for r in rs])
        ax.set_xticks(range(len(rs)), labels, fontsize=7)
        ax.set_ylabel("median ms")
        ax.set_title(model, fontsize=10)
        for i, r in enumerate(rs):
            ax.text(i, r.median_ms, f"{r.median_ms:.2f}", ha="center", va="bottom", fontsize=6)
    fig.suptitle(f"fusedops bench ({report.gpu}, {report.date})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------------

def run_bench(models: Iterable[str] | None = None, size: str = "bench", repeats: int = 20, warmup: int = 3,
              out_dir: str | Path = "artifacts/bench", precisions: Sequence[str] = PRECISIONS, input_sets: int = 3,
              use_compile: bool = True, compile_mode: str | None = None,
              compile_precisions: Sequence[str] = ("fp32", "tf32"), use_graphs: bool = True,
              quiet: bool = False, force: bool = False) -> BenchReport:
    """Time every model (see module doc); returns the report and writes bench.json / bench.png into out_dir."""
    if not torch.cuda.is_available():
        raise FusedopsError("fusedops bench needs a CUDA GPU (torch.cuda.is_available() is False on this machine)")
    from fusedops.models import get_entry, model_names
    from fusedops.plugins import torch_ops

    ok, why = torch_ops.cuda_kernels_available()
    if not ok:
        raise FusedopsError(f"fusedops bench needs the fusedops CUDA kernels: {why} (run `fusedops build-native`)")
    if repeats < 1 or warmup < 0:
        raise FusedopsError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    if input_sets < 1:
        raise FusedopsError(f"input_sets must be >= 1, got {input_sets}")
    out = safe_output.prepare_dir(out_dir, ["bench.json", "bench.png"], force)  # before minutes of timing
    precisions = list(precisions)
    for p in precisions:
        if p not in PRECISIONS:
            raise FusedopsError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
    entries = []
    for m in (list(models) if models else model_names()):
        try:
            entries.append(get_entry(m))
        except ValueError as e:
            raise FusedopsError(str(e)) from None

    log = (lambda s: None) if quiet else (lambda s: print(f"[bench] {s}", flush=True))
    report = BenchReport(
        date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda, size=size,
        repeats=repeats, warmup=warmup, input_sets=input_sets)
    from fusedops import ort_bench

    try:
        from fusedops import trt_bench
    except ImportError:  # the TensorRT rows are optional
        trt_bench = None

    for entry in entries:
        try:
            _bench_model(entry, size, precisions, repeats, warmup, input_sets, use_compile, compile_mode,
                         tuple(compile_precisions), report.rows, log, use_graphs)
        except FusedopsError:
            raise
        except Exception as e:  # noqa: BLE001 - one model's failure is reported, the others still run
            report.errors.append(f"{entry.key}: {type(e).__name__}: {e}")
            log(f"{entry.key} failed: {e}")
            torch.cuda.empty_cache()
        try:
            for r in ort_bench.ort_rows(entry, size):
                report.rows.append(_runtime_row(entry.key, r, "ort"))
        except Exception as e:  # noqa: BLE001
            report.errors.append(f"{entry.key} (onnxruntime rows): {type(e).__name__}: {e}")
        if trt_bench is not None:
            try:
                for r in trt_bench.trt_rows(entry, size, repeats, warmup):
                    report.rows.append(_runtime_row(entry.key, r, "trt"))
            except Exception as e:  # noqa: BLE001
                report.errors.append(f"{entry.key} (TensorRT rows): {type(e).__name__}: {e}")

    _fill_ratios(report.rows)
    report.targets = _targets(report.rows)
    safe_output.write_bytes(out / "bench.json", json.dumps(asdict(report), indent=1, default=_json_default).encode(),
                            force=force)
    png = io.BytesIO()
    if plot(report, png) is not None:
        safe_output.write_bytes(out / "bench.png", png.getvalue(), force=force)
    if not quiet:
        print_table(report)
        print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    return report


def _json_default(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


def add_arguments(ap) -> None:
    """The bench knobs, shared by ``fusedops bench`` and ``python -m fusedops.bench``."""
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--size", choices=["small", "bench"], default="bench")
    ap.add_argument("--precisions", nargs="*", default=list(PRECISIONS), choices=list(PRECISIONS))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--input-sets", type=int, default=3)
    ap.add_argument("--out-dir", default="artifacts/bench")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph replay rows of the fused model")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune")
    ap.add_argument("--compile-precisions", nargs="*", default=["fp32", "tf32"], choices=list(PRECISIONS),
                    help="precisions that get torch.compile rows (each compile costs tens of seconds)")
    g = ap.add_argument_group("latency (--latency: per-call synchronous, enqueue, back-to-back and graph times)")
    g.add_argument("--latency", action="store_true",
                   help="time what a serving caller sees per call at small batches instead (fusedops.latency)")
    g.add_argument("--batches", nargs="*", default=["1", "16", "ref"], help="batch sizes; 'ref' = the model's own")
    g.add_argument("--calls", type=int, default=200, help="timed calls per variant (median)")
    g.add_argument("--compile-modes", nargs="*", default=["default", "reduce-overhead", "max-autotune-no-cudagraphs"],
                   help="torch.compile modes timed with --latency")
    g.add_argument("--compile-batches", nargs="*", default=None,
                   help="batches that get torch.compile rows with --latency (default: all)")
    g.add_argument("--no-ort", action="store_true", help="skip the ONNX Runtime rows")


def run_from_args(a) -> int:
    """Run with parsed flags; FusedopsError propagates (the CLI prints it on one line)."""
    if a.latency:
        from .latency import run_latency

        lat = run_latency(models=a.models, precisions=a.precisions, batches=a.batches,
                          compile_modes=[] if a.no_compile else a.compile_modes, compile_batches=a.compile_batches,
                          calls=a.calls, use_ort=not a.no_ort, out_dir=a.out_dir)
        return 1 if lat.errors else 0
    report = run_bench(models=a.models, size=a.size, repeats=a.repeats, warmup=a.warmup, out_dir=a.out_dir,
                       precisions=a.precisions, input_sets=a.input_sets, use_compile=not a.no_compile,
                       compile_mode=a.compile_mode, compile_precisions=a.compile_precisions,
                       use_graphs=not a.no_graphs, force=getattr(a, "force", False))
    return 1 if report.errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fusedops.bench``: the same as ``fusedops bench``."""
    from .cli import main as cli_main

    return cli_main(["bench", *(argv if argv is not None else __import__("sys").argv[1:])])


if __name__ == "__main__":
    raise SystemExit(main())
