"""Fit gelu_fast16's polynomial (plugins/csrc/cuda/device_common.cuh) and check it in float32 emulation, CPU only.

    python tools/gelu_fit.py [--degree 6]

GELU(x) = x (1 - E / 2) (x > 0) or x E / 2, E = erfc(|x| / sqrt 2) = 2^q(|x|). The kernels evaluate
q(t) = r(t) - t^2 / (2 ln 2) with r a polynomial in t = min(|x|, 5.75), fitted here in float64 to
log2(erfc(t / sqrt 2)) + t^2 / (2 ln 2) on [0, 5.75] by Lawson's iteration (iteratively reweighted least squares
towards the minimax fit), weighted to E's relative error where E / 2 > 1e-4 (below, the result is too small to
matter). Prints the float32 coefficients highest degree first, with 1 subtracted from the constant (the kernels
compute log2(E / 2)), and the float32-emulated GELU's error over [-10, 10]: max abs, and in bfloat16 / float16 ulps
of the result (where |GELU| > 1e-3). The GPU's exhaustive check, with ex2.approx, is tools/gelu_accuracy.cu.
"""

from __future__ import annotations

import argparse
import math

import numpy as np


def target(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    e = np.array([math.erfc(v / math.sqrt(2.0)) for v in t])
    return np.log2(e) + t * t / (2.0 * math.log(2.0)), e


def fit(degree: int, iters: int = 300) -> np.ndarray:
    t = np.linspace(0.0, 5.75, 40001)
    f, e = target(t)
    importance = (e / 2) / np.maximum(e / 2, 1e-4)
    v = np.vander(t, degree + 1)
    w = np.ones_like(t)
    best = (math.inf, None)
    for _ in range(iters):
        c, *_ = np.linalg.lstsq(v * (w * importance)[:, None], f * w * importance, rcond=None)
        err = np.abs(v @ c - f) * importance
        if err.max() < best[0]:
            best = (err.max(), c)
        w = w * (err / err.max()) + 1e-9
        w /= w.sum()
    return best[1]


def emulate(c32: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The kernel's float32 arithmetic (ex2 in float64: the GPU's ex2.approx adds its 2 ulp)."""
    t = np.minimum(np.abs(x), np.float32(5.75))
    r = np.full_like(x, c32[0])
    for k in c32[1:]:
        r = (r * t + k).astype(np.float32)
    q = (x * x * np.float32(-0.72134752044448170) + r).astype(np.float32)
    h = np.exp2(q.astype(np.float64)).astype(np.float32)
    return np.where(x > 0, x * (np.float32(1) - h), x * h).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--degree", type=int, default=6)
    args = ap.parse_args()
    c = fit(args.degree)
    c32 = c.astype(np.float32)
    c32[-1] = np.float32(c[-1] - 1.0)
    print("coefficients, highest degree first (constant minus 1):")
    print("  " + ", ".join(f"{float(v):.9e}f" for v in c32))
    x = np.linspace(-10, 10, 400001).astype(np.float32)
    ref = np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    err = np.abs(emulate(c32, x) - ref)
    big = np.abs(ref) > 1e-3
    ulp = 2.0 ** np.floor(np.log2(np.abs(ref[big])))
    print(f"float32 emulation over [-10, 10]: max abs {err.max():.3g}, "
          f"{(err[big] / (ulp * 2.0 ** -7)).max():.4f} bfloat16 ulp, {(err[big] / (ulp * 2.0 ** -10)).max():.4f} "
          "float16 ulp")


if __name__ == "__main__":
    main()
