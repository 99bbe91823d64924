"""CPU timing of fused vs unfused ONNX Runtime on GroupNorm shapes of real models (docs/exporter.md, "CPU kernels").

    python tools/cpu_shapes_bench.py [--lib PATH] [--iters 30] [--repeats 3] [--only NAME ...]

For each case a small PyTorch block (random weights) is exported, fused, and both graphs are run by ONNX Runtime's
CPU EP (``--threads``: intra-op threads of both sessions, default ORT's own setting), unfused = the standard-op export, fused = the fused
export with the fusedops library (``--lib`` picks another build of it, e.g. the previous kernels for a before/after
table). Sessions are timed alternately (median of ``--iters`` runs after warm-up) and the whole measurement is
repeated ``--repeats`` times, so the spread of the ratio shows the noise of a shared machine. Prints one Markdown
table row per case: shape, S, unfused ms, fused ms, unfused/fused (median and min-max over the repeats).
"""

from __future__ import annotations

import argparse
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


def _session(model, lib: str | None, threads: int = 0):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    if lib:
        so.register_custom_ops_library(lib)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def measure(name: str, lib: str, iters: int, repeats: int, threads: int = 0) -> dict:
    make, shape, s = CASES[name]
    torch.manual_seed(0)
    module = make().eval()
    x = torch.randn(*shape)
    unfused = export_module(module, x)
    fused = fuse_model(unfused)
    assert any(n.domain == "fusedops" for n in fused.graph.node), f"{name}: nothing fused"
    sessions = {"unfused": _session(unfused, None, threads), "fused": _session(fused, lib, threads)}
    feed = {unfused.graph.input[0].name: x.numpy()}
    ys = {k: s_.run(None, feed)[0] for k, s_ in sessions.items()}
    err = float(np.abs(ys["fused"] - ys["unfused"]).max())
    ratios, med = [], {"unfused": [], "fused": []}
    for _ in range(repeats):
        times = {"unfused": [], "fused": []}
        for k, s_ in sessions.items():
            for _ in range(3):
                s_.run(None, feed)
        for _ in range(iters):
            for k, s_ in sessions.items():  # alternate, so drifting load hits both alike
                t0 = time.perf_counter()
                s_.run(None, feed)
                times[k].append(time.perf_counter() - t0)
        for k in times:
            med[k].append(statistics.median(times[k]) * 1e3)
        ratios.append(med["unfused"][-1] / med["fused"][-1])
    return {"name": name, "shape": shape, "S": s, "unfused_ms": statistics.median(med["unfused"]),
            "fused_ms": statistics.median(med["fused"]), "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "max_abs_diff": err}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", default=None, help="libfusedops_ort.so to time (default: this checkout's build)")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--threads", type=int, default=0, help="intra_op_num_threads of both sessions (0: ORT's default); "
                   "1 compares the kernels themselves, least disturbed by other jobs on a shared machine")
    a = p.parse_args(argv)
    lib = a.lib
    if lib is None:
        from fusedops import ort as fo
        lib = str(fo.library_path())
    print("| case | shape | S | unfused ORT ms | fused + library ms | unfused/fused (median; min-max) | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for name in a.only or CASES:
        r = measure(name, lib, a.iters, a.repeats, a.threads)
        print(f"| {r['name']} | {'x'.join(map(str, r['shape']))} | {r['S']} | {r['unfused_ms']:.3f} | "
              f"{r['fused_ms']:.3f} | {r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
              f"{r['max_abs_diff']:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
