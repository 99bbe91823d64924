"""Where 3xTF32's extra error in ConvTransposeGroupNormAct comes from, on the CPU (issue 13).

    python tools/split_3xtf32_check.py          # the convolution (model 4's shape)
    python tools/split_3xtf32_check.py --gemm   # the GEMM's split rules (issue 12), exact accumulation

The GPU kernels' strict float32 (3xTF32: X and W split into TF32 hi + lo, three tensor-core products) is 2-10 x eager
FP32's error against float64. This emulates the split with IEEE float32 accumulation (three float32 convolutions
of the rounded parts, summed in float32) and with exact accumulation, next to eager FP32 and TF32, on a model-4-like
shape; GELU and GroupNorm run in float64 so only the convolution's error shows. If the split with IEEE accumulation
is as accurate as eager FP32, the excess on the GPU comes from the tensor cores' own accumulation, not the split.

It then emulates that accumulation: each MMA adds its exact products to the fp32 accumulator and rounds the sum
toward zero (``rz``). One accumulator for all 216 MMAs an output (the kernel until 2026-11-27 10:00) against fresh
accumulators per kernel row added in IEEE float32 (the kernel since): the first reproduces the GPU's 8-10 x eager
error, the second is below eager's (max and RMS), and per channel chunk (one flush in three) is not.

``--gemm`` compares split rules for the CUTLASS GEMM (K = 8192, three input kinds, products summed exactly, so only
the split's representation error shows): lo rounded to TF32 (cvt.rna) against lo handed to wgmma unrounded (the
tensor core reads its top 19 bits, i.e. truncates), and hi truncated instead of rounded.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F


def tf32(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to TF32 (10 mantissa bits), to nearest with ties away, as cvt.rna.tf32.f32 does."""
    r = ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(x), r, x)


def tf32_truncated(x: torch.Tensor) -> torch.Tensor:
    """The top 19 bits of float32: what a TF32 tensor-core operand keeps of an unrounded float32."""
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


def gemm_split_rules() -> None:
    torch.manual_seed(0)
    m, k, n = 128, 8192, 512
    for kind in ("uniform", "large mean", "wide range"):
        x = torch.rand(m, k)
        x = x + 4 if kind == "large mean" else x * torch.exp(torch.randn(m, k) * 2) if kind == "wide range" else x
        w = (torch.rand(n, k) * 2 - 1) / k ** 0.5  # nn.Linear's initialisation
        ref = x.double() @ w.double().T

        def three(hi, lo):  # hi / lo: float32 -> part; products summed in float64
            xh, wh = hi(x), hi(w)
            xl, wl = lo(x - xh), lo(w - wh)
            return sum(a.double() @ b.double().T for a, b in ((xh, wl), (xl, wh), (xh, wh)))

        rows = {"eager float32": (x @ w.T).double(), "hi, lo rounded": three(tf32, tf32),
                "hi rounded, lo truncated": three(tf32, tf32_truncated),
                "hi truncated, lo truncated": three(tf32_truncated, tf32_truncated),
                "hi truncated, lo rounded": three(tf32_truncated, tf32)}
        for name, y in rows.items():
            e = (y - ref).abs()
            print(f"{kind:10s} {name:28s} max |error| {e.max().item():.3g}, RMS {e.pow(2).mean().sqrt().item():.3g}")


def main() -> None:
    torch.manual_seed(0)
    n, c, hw, groups = 2, 64, 64, 8
    x = torch.randn(n, c, hw, hw) * 1.5 + 0.2
    w = torch.randn(c, c, 3, 3) / (c * 3) ** 0.5
    b = (torch.randn(c) * 0.3)[:, None, None]
    gamma, beta = (torch.rand(c) + 0.5).double(), (torch.randn(c) * 0.5).double()

    def head(y: torch.Tensor) -> torch.Tensor:  # GELU + GroupNorm in float64
        return F.group_norm(F.gelu(y.double()), groups, gamma, beta)

    conv = F.conv_transpose2d
    ref = head(conv(x.double(), w.double()) + b.double())
    xh, wh = tf32(x), tf32(w)
    xl, wl = tf32(x - xh), tf32(w - wh)
    exact = [conv(a.double(), v.double()) for a, v in ((xh, wl), (xl, wh), (xh, wh))]
    rows = {
        "eager float32": conv(x, w) + b,
        "3xTF32 split, float32 accumulation": conv(xh, wl) + conv(xl, wh) + conv(xh, wh) + b,
        "3xTF32 split, exact accumulation": sum(exact) + b.double(),
        "4 products (lo x lo too), exact": sum(exact) + conv(xl.double(), wl.double()) + b.double(),
        "TF32": conv(xh, wh) + b,
    }
    # The GPU's order: chunks of 8 input channels, taps, then the three products (small ones first); each term is one
    # MMA's exact sum of 8 products.
    terms = []
    for q in range(c // 8):
        chan = slice(8 * q, 8 * q + 8)
        for t in range(9):
            tap = torch.zeros(9, dtype=torch.float64)
            tap[t] = 1
            for a, v in ((xh, wl), (xl, wh), (xh, wh)):
                terms.append(conv(a[:, chan].double(), v[chan].double() * tap.view(3, 3)))
    per_row, per_chunk = 9, 27  # terms: a kernel row's three taps x three products; a chunk's nine taps
    rows["tensor-core emulation, one accumulator"] = accumulate(terms, len(terms)) + b
    rows["tensor-core emulation, fresh per kernel row"] = accumulate(terms, per_row) + b
    rows["tensor-core emulation, fresh per chunk"] = accumulate(terms, per_chunk) + b
    for name, y in rows.items():
        e = (head(y) - ref).abs()
        print(f"{name:44s} against float64: max |error| {e.max().item():.3g}, RMS {e.pow(2).mean().sqrt().item():.3g}")


def rz(v: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 rounded toward zero, as the tensor cores round their accumulation."""
    f = v.float()
    return torch.where(f.double().abs() > v.abs(), torch.nextafter(f, torch.zeros_like(f)), f)


def accumulate(terms: list[torch.Tensor], group: int) -> torch.Tensor:
    """Sum of the terms: each group of `group` in fresh accumulators rounded toward zero (one MMA a term), the groups
    added into the running sum in IEEE float32 (round to nearest)."""
    total = torch.zeros_like(terms[0], dtype=torch.float32)
    for g0 in range(0, len(terms), group):
        fresh = torch.zeros_like(terms[0])
        for t in terms[g0:g0 + group]:
            fresh = rz(fresh + t).double()
        total = total + fresh.float()
    return total


if __name__ == "__main__":
    gemm_split_rules() if "--gemm" in sys.argv[1:] else main()
