"""Where 3xTF32's extra error in ConvTransposeGroupNormAct comes from, on the CPU (issue 13).

    python tools/split_3xtf32_check.py

The GPU kernels' strict float32 (3xTF32: X and W split into TF32 hi + lo, three tensor-core products) is 2-10 x eager
FP32's error against float64. This emulates the split with IEEE float32 accumulation (three float32 convolutions
of the rounded parts, summed in float32) and with exact accumulation, next to eager FP32 and TF32, on a model-4-like
shape; GELU and GroupNorm run in float64 so only the convolution's error shows. If the split with IEEE accumulation
is as accurate as eager FP32, the excess on the GPU comes from the tensor cores' own accumulation, not the split.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def tf32(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to TF32 (10 mantissa bits), to nearest with ties away, as cvt.rna.tf32.f32 does."""
    r = ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(x), r, x)


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
    for name, y in rows.items():
        print(f"{name:36s} max |error| against float64 {(head(y) - ref).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
