"""``fusedops bench --latency``: what a serving caller sees per call, at batch 1, 16 and the reference batch.

For each model, precision (fp32 / tf32 / bf16) and batch, every variant is timed four ways:

  sync_ms     median wall time of one call followed by torch.cuda.synchronize(): what a serving process waits for
              (eager, fused and fused_op measured in alternating rounds, so the ratios compare the same moments)
  enqueue_us  median host time of one call issued back to back without synchronising: the launch overhead
  b2b_ms      back-to-back throughput: wall time of ``calls`` calls issued back to back, synchronised once, / calls
  graph_ms    median CUDA-event time of one CUDA-graph replay of the call (eager and fused): GPU time alone
  graph_sync_ms  median wall time of one replay of that graph followed by a synchronisation: the floor of any
              synchronous caller (no host work but the replay; measured in the same alternating rounds as sync_ms)

Variants: ``eager`` (Model), ``compile:<mode>`` (torch.compile(Model) per mode: default, reduce-overhead,
max-autotune-no-cudagraphs), ``fused`` (ModelNew), ``fused_op`` (its fused op called alone, for the per-op host
cost), ``host_yardstick`` (a one-element add: launch + synchronisation of the smallest kernel, in the same rounds:
how fast the shared host is at that moment), and, with ONNX Runtime's CUDA EP, ``ort-cuda-unfused`` /
``ort-cuda-fused`` (IOBinding on device buffers; no host copies are timed; fp32/tf32 exports only) and ``ort-cuda-fused-graph`` (the same with ORT's own CUDA graph,
``enable_cuda_graph``: what an ORT user serving at low latency would configure). Calls run under
torch.inference_mode(), as a server's do; inputs are fresh uniform random tensors, three sets in rotation.

Targets (issue 8, judged here, not in tests): host enqueue of one fused op <= 15 us; models 1-3 at batch 1,
synchronous: fused <= 0.8 x eager and below compile:reduce-overhead; at the reference batch, fused synchronous
within 1.05 x its CUDA-graph replay (judged against the replay's GPU time and, beside it, against the synchronised
replay, which pays the same launch and wake-up latency as any synchronous call); ORT fused / PyTorch fused <= 1.05
at the reference batch.
Writes ``latency.json`` and ``latency.png`` into ``out_dir`` (default: a new folder under ``bench/results/``).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import onnxruntime as ort
import torch
from rich.console import Console
from rich.table import Table

from .. import ort as fo
from ..errors import FusedopsError
from ..provenance import provenance
from ..models import get_entry, model_names
from ..plugins import torch_ops
from . import ort_rows
from .chart import plot_latency, save_figure
from .results import results_dir
from .timing import CapturedCalls, dtype_of, precision_mode

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")
ENQUEUE_TARGET_US = 15.0
BATCH1_VS_EAGER_TARGET = 0.8
SYNC_VS_GRAPH_TARGET = 1.05
ORT_VS_TORCH_TARGET = 1.05


@dataclass
class LatencyRow:
    model: str
    variant: str
    precision: str
    batch: int
    sync_ms: float
    enqueue_us: float | None
    b2b_ms: float | None
    graph_ms: float | None = None
    note: str = ""
    graph_sync_ms: float | None = None


@dataclass
class LatencyTarget:
    model: str
    what: str
    value: float
    limit: float
    met: bool


@dataclass
class LatencyReport:
    date: str
    gpu: str
    torch: str
    calls: int
    rows: list[LatencyRow] = field(default_factory=list)
    targets: list[LatencyTarget] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)  # fusedops.provenance: versions, date, device


# ---------------------------------------------------------------------------------------------------------------------
# Timing one callable
# ---------------------------------------------------------------------------------------------------------------------

def measure(fn: Callable[[torch.Tensor], object], xs: Sequence[torch.Tensor], calls: int, warmup: int = 10,
            host_only: bool = False, sync: bool = True) -> tuple[float | None, float | None, float | None]:
    """(sync_ms, enqueue_us, b2b_ms) of fn over the inputs in rotation. ``host_only``: fn synchronises itself (its
    back-to-back numbers would repeat the synchronous ones), so only sync_ms is returned. ``sync=False``: sync_ms is
    measured elsewhere (interleaved_sync_ms) and returned as None."""
    n = len(xs)
    for i in range(warmup):
        fn(xs[i % n])
    torch.cuda.synchronize()
    sync_times = []
    for i in range(calls if sync else 0):
        t0 = time.perf_counter()
        fn(xs[i % n])
        torch.cuda.synchronize()
        sync_times.append(time.perf_counter() - t0)
    sync_ms = statistics.median(sync_times) * 1e3 if sync_times else None
    if host_only:
        return sync_ms, None, None
    host = []
    start = time.perf_counter()
    for i in range(calls):
        t0 = time.perf_counter()
        fn(xs[i % n])
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    total = time.perf_counter() - start
    return sync_ms, statistics.median(host) * 1e6, total / calls * 1e3


def interleaved_sync_ms(fns: dict[str, Callable[[torch.Tensor], object]], xs: Sequence[torch.Tensor], calls: int,
                        rounds: int = 5) -> dict[str, float]:
    """Median synchronous time of each callable over ``calls`` calls, taken in ``rounds`` alternating blocks: a change
    of the shared machine's state (other tenants, clocks) then falls on every variant alike instead of on whichever
    ran at that moment (eager's batch-1 time moved 73 -> 89 us between two runs of 2026-11-23 on the H200)."""
    n = len(xs)
    for fn in fns.values():
        for i in range(10):
            fn(xs[i % n])
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        for k, fn in fns.items():
            for i in range(per_round):
                t0 = time.perf_counter()
                fn(xs[i % n])
                torch.cuda.synchronize()
                samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}


def _captured(fn, xs) -> CapturedCalls | None:
    try:
        return CapturedCalls(fn, xs)
    except Exception:  # noqa: BLE001 - not every variant is capturable (ORT); the row keeps graph_ms None
        return None


@contextlib.contextmanager
def _captured_op_call(store: list):
    """Records the first fused op call a forward makes (function and arguments), to time the op alone."""

    originals = {name: getattr(torch_ops, name) for name in ("group_norm_act", "gemm_group_norm_act")}

    def recorder(name):
        def call(*args, **kwargs):
            if not store:
                store.append((originals[name], args, kwargs))
            return originals[name](*args, **kwargs)
        return call

    for name in originals:
        setattr(torch_ops, name, recorder(name))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch_ops, name, fn)


# ---------------------------------------------------------------------------------------------------------------------
# One model
# ---------------------------------------------------------------------------------------------------------------------

def _ort_runner(sess, x: torch.Tensor, device_id: int):
    """IOBinding on device buffers; the returned callable enqueues one run without synchronising."""
    x_dev = ort.OrtValue.ortvalue_from_numpy(x.cpu().numpy(), "cuda", device_id)
    io = sess.io_binding()
    io.bind_ortvalue_input(sess.get_inputs()[0].name, x_dev)
    io.bind_output(sess.get_outputs()[0].name, "cuda", device_id)
    ro = ort.RunOptions()
    ro.add_run_config_entry("disable_synchronize_execution_providers", "1")

    def run(sess=sess, io=io, ro=ro, keep=x_dev):
        sess.run_with_iobinding(io, ro)
        return io
    return run


def _ort_graph_runners(sess, xs: Sequence[torch.Tensor], out_shape, device_id: int):
    """ORT's own CUDA graph (CUDA EP option enable_cuda_graph): device buffers bound once per input set, each set its
    own captured graph (run option gpu_graph_id), output preallocated, as ORT requires for graph replay."""
    runners = {}
    for k, x in enumerate(xs):
        x_dev = ort.OrtValue.ortvalue_from_numpy(x.cpu().numpy(), "cuda", device_id)
        y_dev = ort.OrtValue.ortvalue_from_shape_and_type(list(out_shape), x_dev.numpy().dtype, "cuda", device_id)
        io = sess.io_binding()
        io.bind_ortvalue_input(sess.get_inputs()[0].name, x_dev)
        io.bind_ortvalue_output(sess.get_outputs()[0].name, y_dev)
        ro = ort.RunOptions()
        ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
        ro.add_run_config_entry("gpu_graph_id", str(k + 1))

        def run(sess=sess, io=io, ro=ro, keep=(x_dev, y_dev)):
            sess.run_with_iobinding(io, ro)
            return io
        runners[id(x)] = run
    return runners


def _bench_model(entry, precisions, batches, compile_modes, compile_batches, calls, use_ort, rows, log) -> None:

    dev = torch.device("cuda")
    ref = entry.build("bench").to(dev)
    new = entry.build("bench", cls_name="ModelNew").to(dev)
    new.load_state_dict(ref.state_dict())
    ref_batch = entry.bench.input_shape[0]
    gen = torch.Generator().manual_seed(20261123)
    sessions = None
    if use_ort:
        try:
        
            if ort_rows.CUDA_EP in ort.get_available_providers() and fo.unavailable_reason(ort_rows.CUDA_EP) is None:
                sessions = ort_rows.models(entry, "bench")
        except Exception as e:  # noqa: BLE001 - the ORT rows are optional
            log(f"{entry.key}: no ORT rows ({type(e).__name__}: {e})")
    for p in precisions:
        dt = dtype_of(p)
        ref_p, new_p = copy.deepcopy(ref).to(dt), copy.deepcopy(new).to(dt)
        for batch in batches:
            b = ref_batch if batch == "ref" else int(batch)
            xs = [entry.inputs("bench", batch=b, generator=gen, device=dev, dtype=dt)[0] for _ in range(3)]
            with precision_mode(p), torch.inference_mode():
                captures = {"eager": _captured(ref_p, xs), "fused": _captured(new_p, xs)}

                def add(variant, fn, note="", host_only=False, sync_ms=None, graph=None, graph_sync_ms=None):
                    log(f"{entry.key} {p} batch {b}: {variant}")
                    s, e, t = measure(fn, xs, calls, host_only=host_only, sync=sync_ms is None)
                    s = s if sync_ms is None else sync_ms
                    g = None if graph is None else graph.time(repeats=min(calls, 100), warmup=5).median_ms
                    rows.append(LatencyRow(entry.key, variant, p, b, round(s, 4), None if e is None else round(e, 2),
                                           None if t is None else round(t, 4), None if g is None else round(g, 4),
                                           note, None if graph_sync_ms is None else round(graph_sync_ms, 4)))

                captured: list = []
                with _captured_op_call(captured):
                    new_p(xs[0])
                tiny = torch.ones(1, device=dev)
                paired = {"eager": ref_p, "fused": new_p, "host_yardstick": lambda _x, t=tiny: t.add_(1)}
                if captured:
                    op, args, kwargs = captured[0]
                    paired["fused_op"] = lambda _x, op=op, args=args, kwargs=kwargs: op(*args, **kwargs)
                for name, cap in captures.items():
                    if cap is not None:
                        paired[f"{name}_graph"] = cap.replay
                sync = interleaved_sync_ms(paired, xs, calls)
                add("eager", ref_p, sync_ms=sync["eager"], graph=captures["eager"],
                    graph_sync_ms=sync.get("eager_graph"))
                for mode in compile_modes if batch in compile_batches else ():
                    torch._dynamo.reset()
                    compiled = torch.compile(ref_p, mode=None if mode == "default" else mode, dynamic=False)
                    add(f"compile:{mode}", compiled)
                    del compiled
                add("fused", new_p, sync_ms=sync["fused"], graph=captures["fused"],
                    graph_sync_ms=sync.get("fused_graph"))
                if "fused_op" in paired:
                    add("fused_op", paired["fused_op"], note="the fused op alone, same arguments every call",
                        sync_ms=sync["fused_op"])
                add("host_yardstick", paired["host_yardstick"], sync_ms=sync["host_yardstick"],
                    note="one-element add: launch + synchronise")
                del captures
            if sessions is not None and p in ("fp32", "tf32"):
                _ort_variants(entry, sessions, p, b, xs, calls, rows, log)
            del xs
        del ref_p, new_p
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def _ort_variants(entry, sessions, p, b, xs, calls, rows, log) -> None:

    unfused, fused = sessions
    tf32 = p == "tf32"
    popts = [{"device_id": "0", "use_tf32": "1" if tf32 else "0"}, {}]
    providers = [ort_rows.CUDA_EP, ort_rows.CPU_EP]
    made = {"ort-cuda-unfused": ort.InferenceSession(unfused.SerializeToString(), providers=providers,
                                                     provider_options=popts),
            "ort-cuda-fused": fo.session(fused, providers=providers, allow_tf32=tf32, provider_options=popts)}
    out_shape = None
    with precision_mode(p):
        for name, sess in made.items():
            runner_of = {id(x): _ort_runner(sess, x, 0) for x in xs}  # one binding per input set
            log(f"{entry.key} {p} batch {b}: {name}")
            s, e, t = measure(lambda x, runner_of=runner_of: runner_of[id(x)](), xs, calls)
            rows.append(LatencyRow(entry.key, name, p, b, round(s, 4), round(e, 2), round(t, 4),
                                   note="IOBinding on device buffers"))
            out_shape = runner_of[id(xs[0])]().get_outputs()[0].shape()
        name = "ort-cuda-fused-graph"
        try:  # ORT refuses the option when a node of the graph is not on the CUDA EP: the row is then left out
            graph_opts = [dict(popts[0], enable_cuda_graph="1"), {}]
            sess = fo.session(fused, providers=providers, allow_tf32=tf32, provider_options=graph_opts)
            runner_of = _ort_graph_runners(sess, xs, out_shape, 0)
            log(f"{entry.key} {p} batch {b}: {name}")
            s, e, t = measure(lambda x, runner_of=runner_of: runner_of[id(x)](), xs, calls)
        except Exception as err:  # noqa: BLE001 - an optional row; the reason is logged
            log(f"{entry.key} {p} batch {b}: no {name} row ({type(err).__name__}: {str(err)[:200]})")
            return
        rows.append(LatencyRow(entry.key, name, p, b, round(s, 4), round(e, 2), round(t, 4),
                               note="ORT's CUDA graph, IOBinding"))


# ---------------------------------------------------------------------------------------------------------------------
# Targets, output
# ---------------------------------------------------------------------------------------------------------------------

def targets(rows: Sequence[LatencyRow], ref_batches: dict[str, int]) -> list[LatencyTarget]:
    by = {(r.model, r.variant, r.precision, r.batch): r for r in rows}
    out: list[LatencyTarget] = []
    for (model, variant, p, b), r in by.items():
        gemm_model = not model.startswith("convtranspose")
        if variant == "fused_op" and r.enqueue_us is not None:
            out.append(LatencyTarget(model, f"host enqueue of the fused op ({p}, batch {b}), us", r.enqueue_us,
                                     ENQUEUE_TARGET_US, r.enqueue_us <= ENQUEUE_TARGET_US))
        if variant == "fused" and b == 1 and gemm_model:
            eager = by.get((model, "eager", p, b))
            if eager:
                ratio = round(r.sync_ms / eager.sync_ms, 3)
                out.append(LatencyTarget(model, f"batch 1 sync fused / eager ({p})", ratio, BATCH1_VS_EAGER_TARGET,
                                         ratio <= BATCH1_VS_EAGER_TARGET))
            ro = by.get((model, "compile:reduce-overhead", p, b))
            if ro:
                ratio = round(r.sync_ms / ro.sync_ms, 3)
                out.append(LatencyTarget(model, f"batch 1 sync fused / compile:reduce-overhead ({p})", ratio, 1.0,
                                         ratio < 1.0))
        if variant == "fused" and b == ref_batches.get(model) and r.graph_ms:
            ratio = round(r.sync_ms / r.graph_ms, 3)
            out.append(LatencyTarget(model, f"reference batch sync / graph replay GPU time ({p})", ratio,
                                     SYNC_VS_GRAPH_TARGET, ratio <= SYNC_VS_GRAPH_TARGET))
        if variant == "fused" and b == ref_batches.get(model) and r.graph_sync_ms:
            ratio = round(r.sync_ms / r.graph_sync_ms, 3)
            out.append(LatencyTarget(model, f"reference batch sync / synchronised graph replay ({p})", ratio,
                                     SYNC_VS_GRAPH_TARGET, ratio <= SYNC_VS_GRAPH_TARGET))
        if variant in ("ort-cuda-fused", "ort-cuda-fused-graph") and b == ref_batches.get(model):
            torch_fused = by.get((model, "fused", p, b))
            if torch_fused:
                ratio = round(r.sync_ms / torch_fused.sync_ms, 3)
                how = " with ORT's CUDA graph" if variant.endswith("graph") else ""
                out.append(LatencyTarget(model, f"reference batch ORT fused{how} / PyTorch fused ({p})", ratio,
                                         ORT_VS_TORCH_TARGET, ratio <= ORT_VS_TORCH_TARGET))
    return out


def print_report(report: LatencyReport) -> None:
    t = Table(title=f"fusedops bench --latency — {report.gpu}, torch {report.torch}, {report.date}")
    for col in ("model", "variant", "prec", "batch", "sync ms", "enqueue us", "b2b ms", "graph ms", "graph sync ms",
                "note"):
        t.add_column(col, justify="left" if col in ("model", "variant", "prec", "note") else "right")
    for r in report.rows:
        t.add_row(r.model[:28], r.variant, r.precision, str(r.batch), f"{r.sync_ms:.4f}",
                  "" if r.enqueue_us is None else f"{r.enqueue_us:.1f}", "" if r.b2b_ms is None else f"{r.b2b_ms:.4f}",
                  "" if r.graph_ms is None else f"{r.graph_ms:.4f}",
                  "" if r.graph_sync_ms is None else f"{r.graph_sync_ms:.4f}", r.note[:30])
    c = Console(width=170)
    c.print(t)
    tt = Table(title="targets (issue 8)")
    for col in ("model", "what", "value", "limit", "met"):
        tt.add_column(col)
    for g in report.targets:
        tt.add_row(g.model[:28], g.what, f"{g.value:.3f}", f"{g.limit:.3f}", "yes" if g.met else "NO")
    c.print(tt)
    for e in report.errors:
        c.print(f"[red]error:[/red] {e}")


def run_latency(models: Sequence[str] | None = None, precisions: Sequence[str] = ("fp32", "tf32", "bf16"),
                batches: Sequence[str] = ("1", "16", "ref"), compile_modes: Sequence[str] = COMPILE_MODES,
                compile_batches: Sequence[str] | None = None, calls: int = 200, use_ort: bool = True,
                out_dir: str | Path | None = None, quiet: bool = False) -> LatencyReport:
    if not torch.cuda.is_available():
        raise FusedopsError("fusedops bench --latency needs a CUDA GPU (torch.cuda.is_available() is False here)")

    ok, why = torch_ops.cuda_kernels_available()
    if not ok:
        raise FusedopsError(f"fusedops bench --latency needs the fusedops CUDA kernels: {why}")
    if calls < 1:
        raise FusedopsError(f"calls must be >= 1, got {calls}")
    for m in compile_modes:
        if m not in COMPILE_MODES:
            raise FusedopsError(f"unknown compile mode {m!r}; choose from {', '.join(COMPILE_MODES)}")
    for b in batches:
        if b != "ref" and (not str(b).isdigit() or int(b) < 1):
            raise FusedopsError(f"batch must be a positive integer or 'ref', got {b!r}")
    entries = [get_entry(m) for m in (list(models) if models else model_names())]
    log = (lambda s: None) if quiet else (lambda s: print(f"[latency] {s}", flush=True))
    report = LatencyReport(date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                           gpu=torch.cuda.get_device_name(), torch=torch.__version__, calls=calls,
                           provenance=provenance(torch.cuda.get_device_name()))
    cb = list(batches) if compile_batches is None else list(compile_batches)
    for entry in entries:
        try:
            _bench_model(entry, precisions, list(batches), list(compile_modes), cb, calls, use_ort, report.rows, log)
        except Exception as e:  # noqa: BLE001 - one model's failure is reported, the others still run
            report.errors.append(f"{entry.key}: {type(e).__name__}: {e}")
            log(f"{entry.key} failed: {e}")
            torch.cuda.empty_cache()
    report.targets = targets(report.rows, {e.key: e.bench.input_shape[0] for e in entries})
    out = Path(results_dir("latency") if out_dir is None else out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latency.json").write_text(json.dumps(asdict(report), indent=1))
    save_figure(plot_latency(report, BATCH1_VS_EAGER_TARGET), out / "latency.png")
    if not quiet:
        print_report(report)
        print(f"wrote {out / 'latency.json'} and {out / 'latency.png'}")
    return report
