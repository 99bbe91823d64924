"""CPU timing of fused vs unfused ONNX Runtime on GroupNorm shapes of real models (docs/exporter.md, "CPU kernels").

    python tools/cpu_shapes_bench.py [--lib PATH] [--cpu-blas auto|eigen|PATH] [--threads N] [--iters 30]
                                     [--repeats 3] [--only NAME ...] [--breakdown]

For each case a small PyTorch block (random weights) is exported, fused, and both graphs are run by ONNX Runtime's
CPU EP (``--threads``: intra-op threads of both sessions, default ORT's own setting), unfused = the standard-op export, fused = the fused
export with the fusedops library (``--lib`` picks another build of it, e.g. the previous kernels for a before/after
table). Sessions are timed alternately (median of ``--iters`` runs after warm-up) and the whole measurement is
repeated ``--repeats`` times, so the spread of the ratio shows the noise of a shared machine. Prints one Markdown
table row per case: shape, S, unfused ms, fused ms, unfused/fused (median and min-max over the repeats).
``--cpu-blas`` picks the fused GEMM's BLAS (session config ``fusedops.cpu_blas``; auto = what ``fusedops.ort.session``
uses: ``$FUSEDOPS_CPU_BLAS``, else the scipy-openblas32 wheel's OpenBLAS, else the library's search and Eigen).
``--breakdown`` adds, for the GEMM cases, the parts of the unfused graph timed alone (its Linear, i.e. ORT's MatMul +
bias, and its GroupNorm + SiLU on the GEMM's output) and the bound they put on the speed-up: a fused op whose GEMM is
as fast as ORT's and whose epilogue were free would be (Linear + GroupNorm part) / Linear faster than unfused.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
import torch

from fusedops.exporter import fuse_model
from fusedops.exporter.export import export_module


class GnAct(torch.nn.Module):
    """GroupNorm + SiLU, the Stable-Diffusion ResNet-block norm (any rank)."""

    def __init__(self, c, g):
        super().__init__()
        self.gn = torch.nn.GroupNorm(g, c)

    def forward(self, x):
        return torch.nn.functional.silu(self.gn(x))


class TokenMlp(torch.nn.Module):
    """Linear on (B, T, K) → per-token GroupNorm → SiLU (GemmGroupNormAct rows)."""

    def __init__(self, k, c, g):
        super().__init__()
        self.lin, self.gn = torch.nn.Linear(k, c), torch.nn.GroupNorm(g, c)

    def forward(self, x):
        y = self.lin(x)
        return torch.nn.functional.silu(self.gn(y.reshape(-1, y.shape[-1])).reshape(y.shape))


class RowMlp(torch.nn.Module):
    """Linear on (M, K) → GroupNorm → SiLU."""

    def __init__(self, k, c, g):
        super().__init__()
        self.lin, self.gn = torch.nn.Linear(k, c), torch.nn.GroupNorm(g, c)

    def forward(self, x):
        return torch.nn.functional.silu(self.gn(self.lin(x)))


# name -> (module, input shape, S)
CASES = {
    "gn_rows_256x512": (lambda: GnAct(512, 32), (256, 512), 1),
    "gn_rows_4096x256": (lambda: GnAct(256, 32), (4096, 256), 1),
    "gn_rank3_16x256x16": (lambda: GnAct(256, 32), (16, 256, 16), 16),
    "gn_rank3_8x512x64": (lambda: GnAct(512, 32), (8, 512, 64), 64),
    "gn_rank4_4x64x8x8": (lambda: GnAct(64, 32), (4, 64, 8, 8), 64),
    "gn_rank4_8x128x16x16": (lambda: GnAct(128, 32), (8, 128, 16, 16), 256),
    "gn_rank4_2x320x32x32": (lambda: GnAct(320, 32), (2, 320, 32, 32), 1024),
    "gemm_rows_1024x512x512": (lambda: RowMlp(512, 512, 32), (1024, 512), 1),
    "gemm_rows_4096x64x256": (lambda: RowMlp(64, 256, 32), (4096, 64), 1),
    "gemm_tokens_8x128x256x256": (lambda: TokenMlp(256, 256, 32), (8, 128, 256), 1),
    "gemm_tokens_32x64x128x128": (lambda: TokenMlp(128, 128, 16), (32, 64, 128), 1),
}


def _session(model, lib: str | None, threads: int = 0, cpu_blas: str | None = None):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    if lib:
        if cpu_blas:  # read when the library is registered
            so.add_session_config_entry("fusedops.cpu_blas", cpu_blas)
        if threads > 0:  # as fusedops.ort.session() sets it (a build that predates the entry ignores it)
            so.add_session_config_entry("fusedops.intra_op_num_threads", str(threads))
        so.register_custom_ops_library(lib)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _alternate(sessions: dict, feeds: dict, iters: int) -> dict:
    """Median ms of each session, runs alternating so drifting load hits all alike."""
    times = {k: [] for k in sessions}
    for k, s_ in sessions.items():
        for _ in range(3):
            s_.run(None, feeds[k])
    for _ in range(iters):
        for k, s_ in sessions.items():
            t0 = time.perf_counter()
            s_.run(None, feeds[k])
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def measure(name: str, lib: str, iters: int, repeats: int, threads: int = 0, cpu_blas: str | None = None,
            breakdown: bool = False) -> dict:
    make, shape, s = CASES[name]
    torch.manual_seed(0)
    module = make().eval()
    x = torch.randn(*shape)
    unfused = export_module(module, x)
    fused = fuse_model(unfused)
    assert any(n.domain == "fusedops" for n in fused.graph.node), f"{name}: nothing fused"
    sessions = {"unfused": _session(unfused, None, threads), "fused": _session(fused, lib, threads, cpu_blas)}
    feeds = {k: {unfused.graph.input[0].name: x.numpy()} for k in sessions}
    if breakdown and hasattr(module, "lin"):  # the unfused graph's two parts, each exported and timed alone
        with torch.no_grad():
            z = module.lin(x)
        gn = GnAct(z.shape[-1], module.gn.num_groups).eval()
        gn.gn.load_state_dict(module.gn.state_dict())
        z2 = z.reshape(-1, z.shape[-1])
        lin_model, gn_model = export_module(module.lin, x), export_module(gn, z2)
        sessions["linear"] = _session(lin_model, None, threads)
        sessions["gn_part"] = _session(gn_model, None, threads)
        feeds["linear"] = {lin_model.graph.input[0].name: x.numpy()}
        feeds["gn_part"] = {gn_model.graph.input[0].name: z2.numpy()}
    ys = {k: sessions[k].run(None, feeds[k])[0] for k in ("unfused", "fused")}
    # What the fused GEMM runs on, asked while the fused session holds the library: ORT unloads a custom-op library
    # with its last session, and a fresh load would report the library's own search instead of the session's choice.
    loaded = ctypes.CDLL(lib)
    loaded.fusedops_ort_cpu_blas.restype = ctypes.c_char_p
    blas_used = loaded.fusedops_ort_cpu_blas().decode(errors="replace")
    err = float(np.abs(ys["fused"] - ys["unfused"]).max())
    ratios, med = [], {k: [] for k in sessions}
    for _ in range(repeats):
        m = _alternate(sessions, feeds, iters)
        for k in m:
            med[k].append(m[k])
        ratios.append(m["unfused"] / m["fused"])
    out = {"name": name, "shape": shape, "S": s, "unfused_ms": statistics.median(med["unfused"]),
           "fused_ms": statistics.median(med["fused"]), "ratio": statistics.median(ratios),
           "ratio_min": min(ratios), "ratio_max": max(ratios), "max_abs_diff": err, "blas": blas_used}
    if "linear" in med:
        out["linear_ms"] = statistics.median(med["linear"])
        out["gn_part_ms"] = statistics.median(med["gn_part"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", default=None, help="libfusedops_ort.so to time (default: this checkout's build)")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--threads", type=int, default=0, help="intra_op_num_threads of both sessions (0: ORT's default); "
                   "1 compares the kernels themselves, least disturbed by other jobs on a shared machine")
    p.add_argument("--cpu-blas", default="auto", help="the fused GEMM's BLAS: auto (as fusedops.ort.session), "
                   "eigen (the built-in GEMM) or a library path")
    p.add_argument("--breakdown", action="store_true", help="GEMM cases: also time the unfused graph's Linear and "
                   "GroupNorm parts alone")
    a = p.parse_args(argv)
    from fusedops import ort as fo
    from fusedops.plugins import cpu_blas as cb

    lib = a.lib or str(fo.library_path())
    blas = cb.default_choice() if a.cpu_blas == "auto" else a.cpu_blas
    print(f"fused GEMM BLAS: {blas or 'the library search (system sonames), else Eigen'}; "
          f"threads: {a.threads or 'ORT default'}")
    extra = " Linear alone ms | GN part alone ms | bound (L+G)/L |" if a.breakdown else ""
    print("| case | shape | S | unfused ORT ms | fused + library ms | unfused/fused (median; min-max) | max abs diff |"
          + extra)
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if a.breakdown else ""))
    results = []
    for name in a.only or CASES:
        r = measure(name, lib, a.iters, a.repeats, a.threads, blas, a.breakdown)
        results.append(r)
        row = (f"| {r['name']} | {'x'.join(map(str, r['shape']))} | {r['S']} | {r['unfused_ms']:.3f} | "
               f"{r['fused_ms']:.3f} | {r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
               f"{r['max_abs_diff']:.1e} |")
        if a.breakdown:
            if "linear_ms" in r:
                bound = (r["linear_ms"] + r["gn_part_ms"]) / r["linear_ms"]
                row += f" {r['linear_ms']:.3f} | {r['gn_part_ms']:.3f} | {bound:.2f}x |"
            else:
                row += " - | - | - |"
        print(row, flush=True)
    # OpenBLAS names its kernel set (e.g. Haswell or SkylakeX, which OPENBLAS_CORETYPE can force).
    for used in sorted({r["blas"] for r in results}):
        print(f"fused GEMM ran on: {used}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
