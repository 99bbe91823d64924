"""Time and peak memory of fusing a large model vs loading and saving it with onnx (the issue-10 target: < 2x the
time and < 1.5x the peak memory of ``onnx.load`` + ``onnx.save`` with external data).

    python tools/large_model_bench.py [--gb 3.0] [--dtype float32|float16] [--dir DIR]

The model (tests/large_model.py: MatMul with a K x C weight in sparse external data → GroupNormalization → SiLU) is
made in DIR (default: a temporary folder, removed afterwards). Each measurement runs in a fresh Python process; its
peak RSS is the child's ru_maxrss. The baseline loads the weights into memory (``onnx.load``) and writes them out
(``onnx.save(save_as_external_data=True)``); ``fusedops fuse`` maps them and copies them file to file.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

BASELINE = """
import onnx, sys
m = onnx.load(sys.argv[1])
onnx.save(m, sys.argv[2], save_as_external_data=True, all_tensors_to_one_file=True, location="base.onnx.data")
"""
FUSE = """
import sys
from fusedops.exporter_api import fuse_file
r = fuse_file(sys.argv[1], sys.argv[2])
print(r.report.summary())
"""


def run(code: str, *args: str) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB, stdout) of ``code`` in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(proc.stderr)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # max over children so far (KiB)
    if peak <= before:
        peak = before  # this child was not the largest yet: ru_maxrss cannot tell, report the bound
    return wall, peak / 1024, proc.stdout.strip()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb", type=float, default=3.0)
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    p.add_argument("--dir", default=None)
    a = p.parse_args(argv)
    from large_model import make_large_gemm_model

    dtype = np.dtype(a.dtype).type
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        folder = Path(tmp)
        k = 16384
        c = int(a.gb * 2**30 / (k * np.dtype(dtype).itemsize)) // 32 * 32
        src, _ = make_large_gemm_model(folder, k, c, dtype)
        # the fuse run goes first: RUSAGE_CHILDREN's max is then its own peak, and the baseline's if larger
        fuse_t, fuse_rss, summary = run(FUSE, str(src), str(folder / "fused.onnx"))
        base_t, base_rss, _ = run(BASELINE, str(src), str(folder / "base.onnx"))
        out = {"weights_gib": round(k * c * np.dtype(dtype).itemsize / 2**30, 3), "dtype": a.dtype,
               "onnx_load_save_s": round(base_t, 2), "onnx_load_save_peak_mib": round(base_rss),
               "fuse_s": round(fuse_t, 2), "fuse_peak_mib": round(fuse_rss), "time_ratio": round(fuse_t / base_t, 2),
               "memory_ratio": round(fuse_rss / base_rss, 2), "fuser": summary}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
