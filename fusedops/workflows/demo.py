"""The main job: for each reference model — export, fuse, run on every backend available here, compare with eager
PyTorch, print one table (model, backend, max abs error, pass/fail, median latency)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import safe_output
from ..errors import FusedopsError
from ..models import REGISTRY, get_entry
from ..pipeline import export_unfused_and_fused
from .verify import BACKENDS, TOLERANCES, BackendResult, RunContext, run_backend


def _default_size() -> str:
    # Benchmark sizes need a GPU (model 4's activations alone are 2.2 GB); a CPU machine runs the small sizes.
    return "bench" if torch.cuda.is_available() else "small"


def run_demo(models: list[str] | None = None, backends: list[str] | None = None, size: str | None = None,
             out_dir: str | None = None, repeats: int = 10, seed: int = 0, console: Console | None = None,
             force: bool = False) -> list[BackendResult]:

    # Not a terminal (CI logs, pipes): a fixed wide table rather than 80 folded columns.
    console = console or Console(width=None if Console().is_terminal else 150)
    size = size or _default_size()
    try:
        entries = [get_entry(m) for m in models] if models else list(REGISTRY.values())
    except ValueError as e:
        raise FusedopsError(str(e)) from None
    names = backends or list(BACKENDS)
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        raise FusedopsError(f"unknown backend(s) {', '.join(unknown)}; choose from: {', '.join(BACKENDS)}")
    chosen = [BACKENDS[b] for b in names]

    results: list[BackendResult] = []
    tmp = tempfile.TemporaryDirectory() if out_dir is None else None
    work = Path(tmp.name) if out_dir is None else safe_output.prepare_dir(out_dir, [
        f"{e.key}.{size}{ext}" for e in entries for ext in (".onnx", ".fused.onnx")] + ["demo.json"], force)
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as progress:
            task = progress.add_task("demo", total=len(entries) * (1 + len(chosen)))
            for entry in entries:
                progress.update(task, description=f"{entry.key}: export + fuse ({size})")
                model = entry.build(size, seed=seed)
                fused_path = work / f"{entry.key}.{size}.fused.onnx"
                unfused_path = work / f"{entry.key}.{size}.onnx"
                export_unfused_and_fused(model, entry, size, unfused_path, fused_path, force=force)
                progress.advance(task)
                gen = torch.Generator().manual_seed(seed + 1)
                ctx = RunContext(entry, size, model, fused_path, unfused_path, entry.inputs(size, generator=gen),
                                 repeats=repeats)
                for b in chosen:
                    progress.update(task, description=f"{entry.key}: {b.name}")
                    if size == "bench" and b.device == "cpu":
                        # Bench sizes are 137 GFLOP (models 1-3) to 619 GFLOP (model 4) a run: minutes on a CPU.
                        results.append(BackendResult(entry.key, b.name, None, note="skipped: CPU backends run "
                                                     "the small sizes (fusedops demo --size small)"))
                        progress.advance(task)
                        continue
                    try:
                        results.append(run_backend(ctx, b))
                    except FusedopsError as e:
                        results.append(BackendResult(entry.key, b.name, False, note=f"error: {e}"))
                    progress.advance(task)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    finally:
        if tmp is not None:
            tmp.cleanup()

    console.print(render_table(results, size))
    console.print("tolerances vs eager PyTorch: " + "; ".join(
        f"{name} atol={t['atol']:g} rtol={t['rtol']:g}" for name, t in TOLERANCES.items()))
    ran = [r for r in results if r.ok is not None]
    failed = [r for r in ran if not r.ok]
    console.print(f"{len(ran)} run, {len(ran) - len(failed)} passed, {len(failed)} failed, "
                  f"{len(results) - len(ran)} not available here")
    if out_dir:
        safe_output.write_bytes(work / "demo.json", json.dumps([r.__dict__ for r in results], indent=2).encode(),
                                force=force)
    return results


def render_table(results: list[BackendResult], size: str) -> Table:
    table = Table(title=f"fusedops demo ({size} sizes): fused model vs eager PyTorch")
    for col, kw in [("model", {}), ("backend", {}), ("max abs error", {"justify": "right"}),
                    ("result", {}), ("median latency", {"justify": "right"}), ("note", {"overflow": "fold"})]:
        table.add_column(col, **kw)
    for r in results:
        verdict = "[green]pass[/]" if r.ok else ("[red]FAIL[/]" if r.ok is False else "[dim]n/a[/]")
        table.add_row(r.model, r.backend, "" if r.max_abs_err is None else f"{r.max_abs_err:.2e}", verdict,
                      "" if r.median_ms is None else f"{r.median_ms:.3f} ms", r.note)
    return table
