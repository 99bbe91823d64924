"""The CUTLASS kernels' layout assumptions, checked on the host without a GPU: tools/cutlass_layout_check.cu (the
accumulator layout the GroupNorm epilogue relies on, shared memory and can_implement per configuration, and the
3xTF32 mainloop's hand-computed shared-memory addresses of X's register fragment against CuTe's layouts at every
128-byte start). The GPU procedure (tools/gpu/device_cutlass.sh) runs it too; here it runs wherever nvcc and the
CUTLASS headers are (scripts/get_cutlass.sh fetches them; CI's machine has neither, and skips)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CUTLASS_INCLUDE = ROOT / "third_party" / "cutlass" / "include"


def test_cutlass_layout_check_passes(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH to compile tools/cutlass_layout_check.cu")
    if not (CUTLASS_INCLUDE / "cutlass" / "cutlass.h").exists():
        pytest.skip("CUTLASS headers not fetched (scripts/get_cutlass.sh puts them in third_party/cutlass)")
    exe = tmp_path / "cutlass_layout_check"
    build = subprocess.run(
        [nvcc, "-std=c++17", "-O1", "-DNDEBUG", "--expt-relaxed-constexpr", "-arch=sm_90a",
         f"-I{ROOT / 'plugins' / 'include'}", f"-I{ROOT / 'plugins' / 'csrc'}", "-isystem", str(CUTLASS_INCLUDE),
         str(ROOT / "tools" / "cutlass_layout_check.cu"), "-o", str(exe)],
        capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "register-A addresses" in run.stdout and "0 mismatches" in run.stdout, run.stdout
