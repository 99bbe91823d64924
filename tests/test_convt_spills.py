"""The ConvTranspose wgmma kernels that model 4 runs (the register epilogue: `pre` empty or GELU alone; TF32, 16-bit,
3xTF32 and the ring producer) compile without register spills, with the library's own flags (sm90.cmake, Release).
Spills crept in three times on 2026-11-27 (the 16-bit producer's per-chunk reload of a spilled index, ~11 % of its
stall samples; the tile count reloaded every tile; a first branch-free epilogue): ptxas's `-v` report catches them
without a GPU. The shared-memory-epilogue kernels (any other `pre` chain) spill 108-148 bytes today and are not held
to it. Needs nvcc; skips without."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from native_support import nvcc_compile

ROOT = Path(__file__).resolve().parents[1]
ENTRY = re.compile(r"Compiling entry function '(\S+)'")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
# convt_sm90_kernel<T, kPre, kThree, kRing>, mangled: ...kernelI<T>Li<kPre>ELb<three>ELb<ring>E...
KERNEL = re.compile(r"convt_sm90_kernelI(\w+?)L(i\d+|in1)ELb([01])ELb([01])E")


@pytest.fixture(scope="module")
def spills(tmp_path_factory):
    out = tmp_path_factory.mktemp("convt_spills") / "convt_wgmma.cubin"
    run = nvcc_compile("plugins/csrc/cuda/sm90/convt_wgmma.cu", [
        "-O3", "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr", "-prec-div=false",
        "-Xptxas=-v", "-DFUSEDOPS_BUILDING=1", "-cubin", "-o", str(out),
        str(ROOT / "plugins/csrc/cuda/sm90/convt_wgmma.cu")])
    found, current = {}, None
    for line in run.stderr.splitlines():
        if m := ENTRY.search(line):
            current = KERNEL.search(m[1])
        elif (m := SPILL.search(line)) and current:
            t, pre, three, ring = current.groups()
            found[(t, "-1" if pre == "in1" else pre[1:], three == "1", ring == "1")] = int(m[1]) + int(m[2])
            current = None
    return found


def test_every_kernel_was_reported(spills):
    # float32, bfloat16 and float16 x three epilogues, 3xTF32 x three, the ring producer x two
    assert len(spills) == 14, sorted(spills)


def test_register_epilogue_kernels_do_not_spill(spills):
    register = {k: v for k, v in spills.items() if k[1] in ("0", "1")}
    assert len(register) == 10, sorted(register)
    assert all(v == 0 for v in register.values()), {k: v for k, v in register.items() if v}
