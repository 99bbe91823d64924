"""The instruction count of a kernel's loops, from its SASS, without a GPU: the measure that tracked the 3xTF32
mainloop's speed (docs/kernels.md, 2026-11-27: 254 -> 216 instructions a k-tile, ncu cycles in step).

    python tools/sass_loops.py plugins/csrc/cuda/cutlass/kernel_3xtf32_presplit_0.cu   # compile, then list loops
    python tools/sass_loops.py KERNEL.cu --body          # and print each loop's instructions
    python tools/sass_loops.py --sass FILE.sass           # an existing `cuobjdump -sass` listing

Compiles FILE for sm_90a with the CUTLASS kernels' flags (cutlass.cmake) into a temporary cubin and disassembles it
with `cuobjdump -sass`. cuobjdump is not part of every CUDA install (this project's development machine has only
nvcc): when it is not on PATH, the PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm are downloaded once
into third_party/cuda_tools. A loop is a backward branch; loops holding `--match` (default HGMMA) instructions are listed
with their opcode counts, innermost first.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "third_party" / "cuda_tools"
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\b(?:\.\w+)*\s.*?(0x[0-9a-f]+)")


def cuobjdump() -> tuple[str, dict[str, str]]:
    """cuobjdump and the environment to run it in: from PATH, else from the nvidia-cuda-cuobjdump and
    nvidia-cuda-nvdisasm wheels (cuobjdump runs nvdisasm), downloaded once into third_party/cuda_tools."""
    env = dict(os.environ)
    found = shutil.which("cuobjdump")
    if found and shutil.which("nvdisasm"):
        return found, env
    exe = {name: next(TOOLS.glob(f"**/bin/{name}"), None) for name in ("cuobjdump", "nvdisasm")}
    for name, path in exe.items():
        if path is None:
            TOOLS.mkdir(parents=True, exist_ok=True)
            package = "nvidia-cuda-" + name
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            package, "-d", str(TOOLS)], check=True)
            for wheel in TOOLS.glob(package.replace("-", "_") + "-*.whl"):
                zipfile.ZipFile(wheel).extractall(TOOLS)
            exe[name] = next(TOOLS.glob(f"**/bin/{name}"))
        exe[name].chmod(0o755)
    env["NVDISASM_PATH"] = str(exe["nvdisasm"].parent)
    return str(exe["cuobjdump"]), env


def compile_sass(source: Path) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cmd = ["nvcc", "-std=c++17", "-O3", "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a", "-prec-div=false",
               "--expt-relaxed-constexpr", f"-I{ROOT / 'plugins/include'}", f"-I{ROOT / 'plugins/csrc'}",
               "-DFUSEDOPS_BUILDING=1", "-isystem", str(ROOT / "third_party/cutlass/include"), "-cubin",
               "-o", str(cubin), str(source)]
        subprocess.run(cmd, check=True)
        exe, env = cuobjdump()
        return subprocess.run([exe, "-sass", str(cubin)], check=True, capture_output=True, text=True,
                              env=env).stdout


def functions(sass: str) -> list[tuple[str, list[tuple[int, str]]]]:
    """(name, [(address, instruction text)]) for each function of a `cuobjdump -sass` listing."""
    out = []
    for chunk in re.split(r"\n\s+Function : ", sass)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        out.append((name, [(int(a, 16), t) for a, t in _INSTR.findall(chunk)]))
    return out


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def loops(instrs: list[tuple[int, str]], match: str) -> list[list[tuple[int, str]]]:
    """The bodies of the backward branches whose body holds an instruction containing `match`, shortest first."""
    index = {a: i for i, (a, _) in enumerate(instrs)}
    found = []
    for i, (address, text) in enumerate(instrs):
        m = _BRANCH.search(text)
        if m and int(m.group(1), 16) < address and int(m.group(1), 16) in index:
            body = instrs[index[int(m.group(1), 16)]:i + 1]
            if any(match in t for _, t in body):
                found.append(body)
    return sorted(found, key=len)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", nargs="?", type=Path, help="a .cu file to compile for sm_90a")
    p.add_argument("--sass", type=Path, help="read this cuobjdump -sass listing instead of compiling")
    p.add_argument("--match", default="HGMMA", help="list loops holding this text (default: HGMMA)")
    p.add_argument("--body", action="store_true", help="print each loop's instructions")
    args = p.parse_args(argv)
    if (args.source is None) == (args.sass is None):
        p.error("give a .cu file or --sass FILE")
    sass = args.sass.read_text() if args.sass else compile_sass(args.source)
    for name, instrs in functions(sass):
        for body in loops(instrs, args.match):
            counts = collections.Counter(opcode(t) for _, t in body)
            print(f"{name[:90]}  loop {body[0][0]:#x}-{body[-1][0]:#x}: {len(body)} instructions")
            print("   ", ", ".join(f"{k} {v}" for k, v in counts.most_common(24)))
            if args.body:
                for address, text in body:
                    print(f"    {address:#07x}  {text}")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    sys.exit(main())
