"""Model 4 (ConvTranspose2d 64 -> 64 k3 s1 on N x 64 x 256 x 256, GELU, GroupNorm 8) on ONNX Runtime's CUDA EP with
the fusedops library, against the PyTorch path (issue 13: ORT with the library within 1.1 x of PyTorch).

    PYTHONPATH=/tmp/ortgpu:$PYTHONPATH python3 tools/ort_convt_bench.py --batches 1 16 128 --json $OUT/ort_convt.json

Per precision (tf32: float32 X with TF32 products, the default with bf16; fp32: strict; bf16 / fp16: 16-bit X) and
batch, five variants:
  ort-fused     the fuser's graph (fuse_model(..., convtranspose=True): one ConvTransposeGroupNormAct node) on the CUDA
                EP with libfusedops_ort (TF32 as the node's allow_tf32=1 says; fp32: session fusedops.allow_tf32=0)
  ort-fused-graph  the same session option enable_cuda_graph: ORT captures one CUDA graph per input set (run option
                gpu_graph_id; each set's first runs capture, before timing) and replays it: what an ORT user does at
                batch 1, where ORT's own per-run host work is a third of a call
  torch-fused   model 4's ModelNew, the PyTorch path (sm_90: the one fused op; elsewhere cuDNN + the GELU/GroupNorm op)
  ort-unfused   the plain torch export (standard ops) on the CUDA EP (provider option use_tf32): the baseline
  eager         model 4's Model in PyTorch, for context
ORT runs bind device buffers (IOBinding): X is the same torch CUDA tensor the PyTorch variants read, bound by pointer
(bfloat16 included), Y a preallocated CUDA tensor per session, so no host copy is timed.

Timing as `fusedops bench --latency` (its functions): sync_ms = median wall time of one call followed by
torch.cuda.synchronize() (the variants in alternating rounds); b2b_ms = calls issued back to back, synchronised once,
/ calls; enqueue_us = median host time of one call issued back to back. ORT runs skip ORT's own end-of-run
synchronisation (run option disable_synchronize_execution_providers), so both paths are synchronised alike. Three
input sets in rotation. Checks, recorded in the JSON: ORT's profile of one run per graph (the EP of every node; the
fused graph must have all of them on the CUDA EP), the library's CUDA kernel counter, and max |difference| of
ort-fused against torch-fused and eager on the first input. Exit status 2 with one line when onnxruntime has no CUDA
EP, no CUDA device is visible or libfusedops_ort cannot serve the CUDA EP; 1 when a variant failed (the others are
still measured and written).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.1  # issue 13: ORT CUDA EP with the library within 1.1 x of the PyTorch path
CUDA_EP, CPU_EP = "CUDAExecutionProvider", "CPUExecutionProvider"
ONNX_TYPES = {"float32": 1, "float16": 10, "bfloat16": 16}  # onnx.TensorProto element types
PRECISIONS = ("tf32", "bf16", "fp32", "fp16")
CIN, COUT, HW, K = 64, 64, 256, 3
VARIANTS = ("ort-fused", "ort-fused-graph", "torch-fused", "ort-unfused", "eager")


def fail(msg: str) -> None:
    print(f"ort_convt_bench: {msg}", file=sys.stderr)
    sys.exit(2)


def environment():
    """(onnxruntime, torch, fusedops.ort) or a one-line exit naming what is missing."""
    try:
        import onnxruntime as ort  # lazy: its absence is reported in one line, after --help
    except ImportError as e:
        fail(f"onnxruntime is not importable ({e}); install onnxruntime-gpu or put its install on PYTHONPATH")
    if CUDA_EP not in ort.get_available_providers():
        fail(f"onnxruntime {ort.__version__} ({Path(ort.__file__).parent}) has no {CUDA_EP} (it offers "
             f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu or put it first on PYTHONPATH")
    import torch  # lazy: after the onnxruntime check, so that its absence is named first

    if not torch.cuda.is_available():
        fail("no CUDA device visible to PyTorch (torch.cuda.is_available() is False)")
    from fusedops import ort as fo  # lazy: loads the library's counters only once the environment is known

    why = fo.unavailable_reason(CUDA_EP)
    if why:
        fail(f"libfusedops_ort cannot serve the CUDA EP: {why.splitlines()[0]}")
    return ort, torch, fo


def models(torch, dtype):
    """(Model, ModelNew with Model's weights, unfused ONNX, fused ONNX) of model 4 at its bench size in dtype."""
    from fusedops.exporter import fuse_model  # lazy: the exporter needs torch.onnx, imported after the checks
    from fusedops.exporter.export import export_module
    from fusedops.models.registry import get_entry

    entry = get_entry("4")
    ref = entry.build("bench").to(dtype)
    new = entry.build("bench", cls_name="ModelNew").to(dtype)
    new.load_state_dict(ref.state_dict())
    unfused = export_module(ref, torch.rand(2, CIN, HW, HW).to(dtype))  # dynamic batch
    fused = fuse_model(unfused, convtranspose=True)
    ops = [n.op_type for n in fused.graph.node if n.op_type not in ("Cast", "Constant")]
    if ops != ["ConvTransposeGroupNormAct"]:
        raise RuntimeError(f"the fuser's graph of model 4 is {ops}, not one ConvTransposeGroupNormAct node")
    return ref.cuda(), new.cuda(), unfused, fused


def sessions(ort, fo, unfused, fused, prec, profile_dir=None, only=None):
    """{variant: session} (a variant whose session ORT refuses: the message instead), on the CUDA EP, for the
    variants named in ``only`` (default: all); profiled (profile_dir) without the CUDA-graph session, whose
    placement is ort-fused's."""
    popts = [{"device_id": "0", "use_tf32": "0" if prec == "fp32" else "1",
              "arena_extend_strategy": "kSameAsRequested"}, {}]
    graph = [{**popts[0], "enable_cuda_graph": "1"}, {}]
    out = {}
    variants = [("ort-fused", fused), ("ort-fused-graph", fused), ("ort-unfused", unfused)]
    for name, model in variants[::2] if profile_dir else variants:
        if only is not None and name not in only:
            continue
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if profile_dir:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(profile_dir, name)
        try:
            if name.startswith("ort-fused"):
                s = fo.session(model, providers=[CUDA_EP, CPU_EP], allow_tf32=prec != "fp32", sess_options=so,
                               provider_options=graph if name == "ort-fused-graph" else popts)
            else:
                s = ort.InferenceSession(model.SerializeToString(), so, providers=[CUDA_EP, CPU_EP],
                                         provider_options=popts)
        except Exception as e:  # noqa: BLE001 - one variant's failure is reported, the others still run
            out[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            continue
        if s.get_providers()[0] != CUDA_EP:
            fail(f"onnxruntime did not start the CUDA EP (session providers {s.get_providers()}); check its CUDA / "
                 f"cuDNN libraries")
        out[name] = s
    return out


def ort_runner(ort, sess, x, y, sync: bool = False, graph_id: int | None = None):
    """One run of `sess` on device buffers x -> y (torch CUDA tensors bound by pointer); enqueue only unless sync;
    `graph_id`: the CUDA graph this binding captures and replays (a session with enable_cuda_graph)."""
    io = sess.io_binding()
    elem = ONNX_TYPES[str(x.dtype).replace("torch.", "")]
    io.bind_input(sess.get_inputs()[0].name, "cuda", 0, elem, list(x.shape), x.data_ptr())
    io.bind_output(sess.get_outputs()[0].name, "cuda", 0, elem, list(y.shape), y.data_ptr())
    ro = ort.RunOptions()
    if not sync:
        ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
    if graph_id is not None:
        ro.add_run_config_entry("gpu_graph_id", str(graph_id))

    def run(_x=None, sess=sess, io=io, ro=ro, keep=(x, y)):
        sess.run_with_iobinding(io, ro)
    return run


def placement(ort, torch, fo, unfused, fused, prec, dtype) -> dict:
    """{variant: {op_type: [EPs]}} from ORT's profile of one batch-1 run (or the session error)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        made = sessions(ort, fo, unfused, fused, prec, profile_dir=tmp)
        x = torch.rand(1, CIN, HW, HW, device="cuda").to(dtype)
        y = torch.empty(1, COUT, HW + K - 1, HW + K - 1, device="cuda", dtype=dtype)
        torch.cuda.synchronize()
        for name, s in made.items():
            if isinstance(s, str):
                out[name] = s
                continue
            ort_runner(ort, s, x, y, sync=True)()
            with open(s.end_profiling()) as fh:
                events = [e for e in json.load(fh) if e.get("cat") == "Node" and e.get("args", {}).get("op_name")]
            eps: dict[str, set] = {}
            for e in events:
                eps.setdefault(e["args"]["op_name"], set()).add(e["args"].get("provider", "?"))
            out[name] = {op: sorted(p) for op, p in sorted(eps.items())}
        del made
    return out


# Ops that only compute shapes: ORT may keep them on the CPU EP beside a CUDA graph at no cost worth a note.
SHAPE_OPS = {"Shape", "Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Constant", "ConstantOfShape", "Range",
             "Size", "Identity"}


def off_cuda(where) -> dict | str:
    """The profiled graph's nodes (other than shape computations) that did not run on the CUDA EP only."""
    if isinstance(where, str):
        return where
    return {op: eps for op, eps in where.items() if eps != [CUDA_EP] and op not in SHAPE_OPS}


def bench_precision(ort, torch, fo, prec, batches, calls, report) -> None:
    from fusedops.benchmark.latency import interleaved_sync_ms, measure  # lazy: imports onnxruntime (checked first)
    from fusedops.benchmark.timing import precision_mode

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec, torch.float32)
    ref, new, unfused, fused = models(torch, dtype)
    report["placement"][prec] = where = placement(ort, torch, fo, unfused, fused, prec, dtype)
    skip = {}
    for name in ("ort-fused", "ort-fused-graph", "ort-unfused"):
        off = off_cuda(where.get(name.replace("-graph", ""), "not profiled"))
        if off:  # a CPU EP node at model 4's size takes seconds a call: not timed
            why = "session refused" if isinstance(off, str) else "nodes off the CUDA EP"
            skip[name] = f"{prec}: {name} not timed: {why}: {off}"
            (report["errors"] if name == "ort-fused" else report["notes"]).append(skip[name])
            print(skip[name], flush=True)
    made = {k: s for k, s in sessions(ort, fo, unfused, fused, prec, only=("ort-fused", "ort-unfused")).items()
            if k not in skip and not isinstance(s, str)}
    mode = "fp32" if prec == "fp32" else "tf32"
    for batch in batches:
        gen = torch.Generator(device="cuda").manual_seed(20261127 + batch)
        xs = [torch.rand(batch, CIN, HW, HW, device="cuda", generator=gen).to(dtype) for _ in range(3)]
        fns, outs, this_batch = {}, {}, dict(made)
        # A CUDA-graph session per batch: ORT keeps each gpu_graph_id's graph for the session's life, with the
        # buffers of its capture, so a session shared by batches replays the last batch's freed buffers
        # (2026-11-27 08:52, H200: an illegal memory access at the second batch, then every allocation failed).
        if "ort-fused-graph" not in skip:
            graph_session = sessions(ort, fo, unfused, fused, prec, only=("ort-fused-graph",))["ort-fused-graph"]
            if isinstance(graph_session, str):
                report["errors"].append(f"{prec} batch {batch}: ort-fused-graph: {graph_session}")
            else:
                this_batch["ort-fused-graph"] = graph_session
        for name, s in this_batch.items():
            outs[name] = torch.empty(batch, COUT, HW + K - 1, HW + K - 1, device="cuda", dtype=dtype)
            graph = name == "ort-fused-graph"
            runs = {id(x): ort_runner(ort, s, x, outs[name], graph_id=i if graph else None) for i, x in enumerate(xs)}
            fns[name] = lambda x, runs=runs: runs[id(x)]()
        fns.update({"torch-fused": new, "eager": ref})
        torch.cuda.synchronize()  # xs were written on torch's stream; ORT reads them on its own
        with precision_mode(mode), torch.inference_mode():
            ok = {}
            for name in VARIANTS:  # first call: plans, cuDNN's algorithm search; a failure is reported
                if name in fns:
                    try:
                        for x in xs if name == "ort-fused-graph" else xs[:1]:  # each graph: a plain run, a capture
                            for _ in range(2 if name == "ort-fused-graph" else 1):
                                fns[name](x)
                        torch.cuda.synchronize()
                        ok[name] = fns[name]
                    except Exception as e:  # noqa: BLE001
                        report["errors"].append(f"{prec} batch {batch}: {name}: {type(e).__name__}: {str(e)[:300]}")
            calls_before = fo.kernel_calls("cuda")
            sync = interleaved_sync_ms(ok, xs, calls)
            timed = {name: measure(fn, xs, calls, sync=False) for name, fn in ok.items()}
            if "ort-fused" in ok and fo.kernel_calls("cuda") == calls_before:
                report["errors"].append(f"{prec} batch {batch}: ort-fused did not run the library's CUDA kernel")
            for name in ok:
                _, enq, b2b = timed[name]
                report["rows"].append({"precision": prec, "batch": batch, "variant": name,
                                       "sync_ms": round(sync[name], 4), "b2b_ms": round(b2b, 4),
                                       "enqueue_us": round(enq, 2)})
            for mine in ("ort-fused", "ort-fused-graph"):
                if mine not in ok:
                    continue
                ok[mine](xs[0])
                torch.cuda.synchronize()
                y_ort = outs[mine].float()
                for other in ("torch-fused", "eager"):
                    if other in ok:
                        diff = (y_ort - ok[other](xs[0]).float()).abs().max().item()
                        report["accuracy"].append({"precision": prec, "batch": batch, "variant": mine,
                                                   "against": other, "max_abs_diff": diff})
        del xs, fns, outs, ok, this_batch
        gc.collect()
        torch.cuda.empty_cache()
    del made, ref, new
    gc.collect()
    torch.cuda.empty_cache()


def ratios(rows) -> list[dict]:
    by = {(r["precision"], r["batch"], r["variant"]): r for r in rows}
    out = []
    for (prec, batch, variant), r in by.items():
        t = by.get((prec, batch, "torch-fused"))
        u = by.get((prec, batch, "ort-unfused"))
        if not variant.startswith("ort-fused") or t is None:
            continue
        out.append({"precision": prec, "batch": batch, "variant": variant,
                    "ort_over_torch_sync": round(r["sync_ms"] / t["sync_ms"], 3),
                    "ort_over_torch_b2b": round(r["b2b_ms"] / t["b2b_ms"], 3),
                    "unfused_over_fused_sync": round(u["sync_ms"] / r["sync_ms"], 3) if u else None,
                    "met": r["sync_ms"] / t["sync_ms"] <= TARGET})
    return out


def print_report(report) -> None:
    print(f"\nmodel 4 on {report['gpu']}, torch {report['torch']}, onnxruntime {report['onnxruntime']}, "
          f"{report['calls']} calls a variant")
    print(f"{'prec':5s} {'batch':>5s} {'variant':15s} {'sync ms':>9s} {'b2b ms':>9s} {'enqueue us':>10s}")
    for r in report["rows"]:
        print(f"{r['precision']:5s} {r['batch']:5d} {r['variant']:15s} {r['sync_ms']:9.3f} {r['b2b_ms']:9.3f} "
              f"{r['enqueue_us']:10.1f}")
    for q in report["ratios"]:
        unf = f", unfused / fused ORT {q['unfused_over_fused_sync']:.2f}" if q["unfused_over_fused_sync"] else ""
        print(f"{q['precision']} batch {q['batch']}: {q['variant']} / PyTorch fused sync "
              f"{q['ort_over_torch_sync']:.3f}, b2b {q['ort_over_torch_b2b']:.3f} "
              f"(target <= {TARGET}: {'met' if q['met'] else 'NOT met'}){unf}")
    for a in report["accuracy"]:
        print(f"{a['precision']} batch {a['batch']}: max |{a['variant']} - {a['against']}| = {a['max_abs_diff']:.3g}")
    for n in report["notes"]:
        print(f"note: {n}")
    for e in report["errors"]:
        print(f"error: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 128])
    ap.add_argument("--precisions", nargs="+", default=["tf32", "bf16"], choices=PRECISIONS)
    ap.add_argument("--calls", type=int, default=100, help="calls per variant for each timing (default 100)")
    ap.add_argument("--json", help="write the rows, ratios, placement and checks here")
    a = ap.parse_args(argv)
    if a.calls < 1 or any(b < 1 for b in a.batches):
        ap.error("--calls and --batches must be positive")
    ort, torch, fo = environment()
    from fusedops.provenance import provenance  # lazy: after the environment checks, as every fusedops import here

    gpu = torch.cuda.get_device_name()
    report = {"tool": "tools/ort_convt_bench.py", "gpu": gpu, "torch": torch.__version__,
              "onnxruntime": ort.__version__, "calls": a.calls, "target": TARGET, "provenance": provenance(gpu),
              "rows": [], "ratios": [], "placement": {}, "accuracy": [], "notes": [], "errors": []}
    for prec in a.precisions:
        t0 = time.perf_counter()
        try:
            bench_precision(ort, torch, fo, prec, sorted(a.batches), a.calls, report)
        except Exception as e:  # noqa: BLE001 - one precision's failure is reported, the others still run
            report["errors"].append(f"{prec}: {type(e).__name__}: {str(e)[:500]}")
            torch.cuda.empty_cache()
        print(f"[ort_convt_bench] {prec} done in {time.perf_counter() - t0:.0f} s", flush=True)
    report["ratios"] = ratios(report["rows"])
    print_report(report)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(report, indent=1))
        print(f"wrote {a.json}")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
