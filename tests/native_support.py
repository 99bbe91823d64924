"""What every test of the native libraries needs first: a C++ toolchain and the header dependencies
(scripts/get_native_deps.sh fetches Eigen when missing). Skips, with the reason, where either is unavailable."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def require_native_build(what: str = "the native core") -> None:
    """pytest.skip naming ``what`` when cmake or a C++ compiler is missing, or when the header deps cannot be had."""
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        pytest.skip(f"cmake or a C++ compiler is not available to build {what}")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "get_native_deps.sh")], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        pytest.skip(f"native header deps unavailable (offline?): {proc.stdout.strip().splitlines()[-1:]}")


def built_abi(what: str = "the native core"):
    """fusedops.plugins.abi with libfusedops.so built (here, if needed) and loaded; skips where it cannot be built."""
    require_native_build(what)
    from fusedops.plugins import abi, native  # lazy: a skipped module never imports the native layer

    native.build(cuda="auto", targets=["fusedops"])
    abi.load()
    return abi


def built_ort(what: str = "libfusedops_ort.so"):
    """fusedops.ort with libfusedops_ort.so built (here, if needed); skips where it cannot be built."""
    require_native_build(what)
    from fusedops import ort  # lazy: a skipped module never imports the native layer

    ort.build_library(cuda="auto", fetch_deps=False)
    return ort


def nvcc_compile(what: str, args: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    """nvcc -std=c++17 with the project's include folders and ``args``; pytest.skip naming ``what`` without nvcc, a
    failure with nvcc's message when it cannot compile. The result's stderr holds ptxas's -v report where asked."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip(f"no nvcc on PATH to compile {what}")
    run = subprocess.run([nvcc, "-std=c++17", f"-I{ROOT / 'plugins' / 'include'}", f"-I{ROOT / 'plugins' / 'csrc'}",
                          *args], capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"nvcc could not compile {what}:\n{run.stderr[-3000:]}"
    return run
