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

Writes ``bench.json`` and ``bench.png`` (each time / the floor, target lines) into ``out_dir`` (default: a new
folder under ``bench/results/``) and prints a table.
"""

from __future__ import annotations

import copy
import datetime as _dt
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from .. import safe_output
from ..errors import FusedopsError
from ..provenance import provenance
from ..models import get_entry, model_names
from ..plugins import torch_ops
from . import ort_rows, trt_rows
from .chart import plot_bench, save_figure
from .results import BenchReport, results_dir, Row, _fill_ratios, _json_default, _runtime_row, _targets, print_table
from .timing import PRECISIONS, Timing, dtype_of, precision_mode, time_cuda, time_cuda_graph


def _row(model: str, variant: str, p: str, t: Timing, note: str = "") -> Row:
    return Row(model, variant, p, round(t.median_ms, 4), round(t.min_ms, 4), round(t.max_ms, 4),
               round(t.peak_extra_bytes / 2**20, 1), round(t.output_bytes / 2**20, 1), note=note)


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max().item())


# ---------------------------------------------------------------------------------------------------------------------
# One model

def _first_linear(model: torch.nn.Module) -> torch.nn.Linear:
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            return m
    raise FusedopsError(f"{type(model).__name__} has no nn.Linear")


def _bench_model(entry, size: str, precisions: Sequence[str], repeats: int, warmup: int, input_sets: int,
                 use_compile: bool, compile_mode: str | None, compile_precisions: tuple[str, ...], rows: list[Row],
                 log: Callable[[str], None], use_graphs: bool = True) -> None:
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


def run_bench(models: Iterable[str] | None = None, size: str = "bench", repeats: int = 20, warmup: int = 3,
              out_dir: str | Path | None = None, precisions: Sequence[str] = PRECISIONS, input_sets: int = 3,
              use_compile: bool = True, compile_mode: str | None = None,
              compile_precisions: Sequence[str] = ("fp32", "tf32"), use_graphs: bool = True,
              quiet: bool = False, force: bool = False) -> BenchReport:
    """Time every model (see module doc); returns the report and writes bench.json / bench.png into out_dir."""
    if not torch.cuda.is_available():
        raise FusedopsError("fusedops bench needs a CUDA GPU (torch.cuda.is_available() is False on this machine)")
    ok, why = torch_ops.cuda_kernels_available()
    if not ok:
        raise FusedopsError(f"fusedops bench needs the fusedops CUDA kernels: {why} (run `fusedops build-native`)")
    if repeats < 1 or warmup < 0:
        raise FusedopsError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    if input_sets < 1:
        raise FusedopsError(f"input_sets must be >= 1, got {input_sets}")
    out_dir = results_dir("bench") if out_dir is None else out_dir
    out = safe_output.prepare_dir(out_dir, ["bench.json", "bench.png"], force)  # before minutes of timing
    precisions = list(precisions)
    for p in precisions:
        if p not in PRECISIONS:
            raise FusedopsError(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
    entries = [get_entry(m) for m in (list(models) if models else model_names())]

    log = (lambda s: None) if quiet else (lambda s: print(f"[bench] {s}", flush=True))
    report = BenchReport(
        date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda, size=size,
        repeats=repeats, warmup=warmup, input_sets=input_sets,
        provenance=provenance(torch.cuda.get_device_name()))
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
            for r in ort_rows.ort_rows(entry, size):
                report.rows.append(_runtime_row(entry.key, r, "ort"))
        except Exception as e:  # noqa: BLE001
            report.errors.append(f"{entry.key} (onnxruntime rows): {type(e).__name__}: {e}")
        try:
            for r in trt_rows.trt_rows(entry, size, repeats, warmup):
                report.rows.append(_runtime_row(entry.key, r, "trt"))
        except Exception as e:  # noqa: BLE001
            report.errors.append(f"{entry.key} (TensorRT rows): {type(e).__name__}: {e}")

    _fill_ratios(report.rows)
    report.targets = _targets(report.rows)
    safe_output.write_bytes(out / "bench.json", json.dumps(asdict(report), indent=1, default=_json_default).encode(),
                            force=force)
    png = io.BytesIO()
    if save_figure(plot_bench(report), png):
        safe_output.write_bytes(out / "bench.png", png.getvalue(), force=force)
    if not quiet:
        print_table(report)
        print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    return report

