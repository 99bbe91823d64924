"""The 3xTF32 mainloop's machine code, checked without a GPU (tools/sass_loops.py: nvcc + cuobjdump).

The kernel's speed tracked its instructions a k-tile (docs/kernels.md, 2026-11-27: 254 -> 216, ncu cycles in step),
and ptxas decides them: an innocent-looking edit of three_tf32_mainloop.cuh made it rebuild addresses from threadIdx
every k-tile (+25 instructions) or spill inside the loop. This pins what nvcc 13.0 gives today; another nvcc may
schedule differently, so it runs only on that version.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "plugins" / "csrc" / "cuda" / "cutlass"
_spec = importlib.util.spec_from_file_location("sass_loops", ROOT / "tools" / "sass_loops.py")
sass_loops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_loops)


def _nvcc_version() -> str | None:
    if shutil.which("nvcc") is None:
        return None
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _skip_reason() -> str | None:
    version = _nvcc_version()
    if version is None:
        return "no nvcc on PATH: the kernel's SASS cannot be compiled here"
    if version != "13.0":
        return f"nvcc {version}: the instruction counts are pinned for nvcc 13.0 (ptxas schedules differ by version)"
    if not (ROOT / "third_party" / "cutlass" / "include" / "cutlass" / "cutlass.h").is_file():
        return "CUTLASS headers not fetched (scripts/get_cutlass.sh)"
    try:
        sass_loops.cuobjdump()
    except (OSError, subprocess.CalledProcessError, StopIteration) as e:
        return f"cuobjdump / nvdisasm unavailable (PyPI wheels nvidia-cuda-cuobjdump / -nvdisasm): {e}"
    return None


@pytest.fixture(scope="module")
def skip_unless_toolchain():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)


# (kernel file, most instructions a k-tile measured with nvcc 13.0 on 2026-11-27)
CASES = [("kernel_3xtf32_presplit_0.cu", 216),  # production: prepared weights, cluster of two
         ("kernel_3xtf32_0.cu", 308)]           # W split in the kernel (TensorRT), cluster of two


@pytest.mark.parametrize("source,most", CASES)
def test_mainloop_k_tile_stays_lean(skip_unless_toolchain, source, most):
    sass = sass_loops.compile_sass(KERNELS / source)
    (name, instrs), = [f for f in sass_loops.functions(sass) if "GemmUniversal" in f[0]]
    body = sass_loops.loops(instrs, "HGMMA")[0]  # the innermost loop holding wgmmas: one k-tile
    ops = [sass_loops.opcode(t) for _, t in body]
    assert sum(op.startswith("HGMMA") for op in ops) == 12, "3 products x 4 k-blocks a k-tile"
    assert not [op for op in ops if op.startswith(("LDL", "STL"))], "local memory (a spill) inside the k-tile loop"
    assert len(body) <= most, (f"{source}: {len(body)} instructions a k-tile (was {most}); "
                               f"see `python tools/sass_loops.py {KERNELS.relative_to(ROOT) / source} --body`")
