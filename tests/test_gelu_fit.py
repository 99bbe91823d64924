"""tools/gelu_fit.py reproduces gelu_fast16's coefficients in device_common.cuh, and their float32-emulated GELU is
within 0.01 bfloat16 / 0.05 float16 ulp of float64 over [-10, 10] (the GPU's exhaustive sweep: tools/gelu_accuracy.cu,
0.0017 / 0.0137 ulp on the H200 with ex2.approx, 2026-11-27)."""

from __future__ import annotations

import importlib.util
import math
import pathlib
import re

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gelu_fit", ROOT / "tools" / "gelu_fit.py")
gelu_fit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gelu_fit)


def kernel_coefficients() -> list[float]:
    text = (ROOT / "plugins" / "csrc" / "cuda" / "device_common.cuh").read_text()
    body = text[text.index("float gelu_fast16(float x)"):]
    body = body[:body.index("return gelu_poly")]
    return [float(v) for v in re.findall(r"(-?\d\.\d+e[-+]\d+)f", body)]


def test_the_fit_reproduces_the_kernels_coefficients():
    c = gelu_fit.fit(6)
    c32 = c.astype(np.float32)
    c32[-1] = np.float32(c[-1] - 1.0)
    assert kernel_coefficients() == [float(f"{float(v):.9e}") for v in c32]


def test_the_kernels_polynomial_is_far_below_a_16bit_ulp():
    c32 = np.array(kernel_coefficients(), dtype=np.float32)
    x = np.linspace(-10, 10, 100001).astype(np.float32)
    ref = np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    err = np.abs(gelu_fit.emulate(c32, x) - ref)
    big = np.abs(ref) > 1e-3
    ulp = 2.0 ** np.floor(np.log2(np.abs(ref[big])))
    assert err.max() < 1e-6
    assert (err[big] / (ulp * 2.0 ** -7)).max() < 0.01
    assert (err[big] / (ulp * 2.0 ** -10)).max() < 0.05
    # a coefficient off in its fifth digit shows
    bad = c32.copy()
    bad[2] *= np.float32(1.0001)
    assert (np.abs(gelu_fit.emulate(bad, x) - ref)[big] / (ulp * 2.0 ** -10)).max() > 0.05
