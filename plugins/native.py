"""Build and locate the native fusedops libraries (CMake project in ``plugins/``).

    build(cuda="auto", targets=None, verbose=False) -> Path   configure + build; returns the folder of the libraries
    build_dir() -> Path                                       $FUSEDOPS_BUILD_DIR, else build/native at the repo root
    library_dir() -> Path                                     where the libraries are loaded from (below)
    library_path(name="fusedops") -> Path | None              e.g. "fusedops", "fusedops_ort", "fusedops_trt"
    missing_library(file_name, build_hint) -> str             the error line for a library that is not there

Where the libraries are loaded from: ``$FUSEDOPS_BUILD_DIR/lib`` when that is set; in a development checkout
(editable install, or the repository on ``sys.path``) ``build/native/lib``, which ``fusedops build-native`` fills;
in an installed package ``fusedops/plugins/lib``, which ``pip install`` fills (the root ``CMakeLists.txt``).

Header locations come from the environment variables ``ORT_INCLUDE_DIR``, ``TENSORRT_INCLUDE_DIR``,
``EIGEN_INCLUDE_DIR`` and ``CUTLASS_INCLUDE_DIR`` when set (otherwise CMake looks in ``third_party/``);
``FUSEDOPS_CUDA_ARCHS`` picks the CUDA architectures. The PyTorch ops are built against the torch this Python imports
(its CMake package).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from fusedops.errors import FusedopsError

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = REPO_ROOT / "plugins"
PACKAGE_LIB_DIR = Path(__file__).resolve().parent / "lib"  # an installed package's libraries (from the wheel)
_HEADER_VARS = ("ORT_INCLUDE_DIR", "TENSORRT_INCLUDE_DIR", "EIGEN_INCLUDE_DIR", "CUTLASS_INCLUDE_DIR",
                "FUSEDOPS_CUDA_ARCHS")
_CUDA_MODES = {"auto": "AUTO", "on": "ON", "off": "OFF", True: "ON", False: "OFF", None: "AUTO"}


def build_dir() -> Path:
    """The CMake build folder: ``$FUSEDOPS_BUILD_DIR`` if set, else ``build/native`` under the repository root."""
    env = os.environ.get("FUSEDOPS_BUILD_DIR")
    return Path(env).resolve() if env else REPO_ROOT / "build" / "native"


def source_checkout() -> bool:
    """True when this code runs from a repository checkout (it has the native project), not an installed wheel."""
    return (REPO_ROOT / "pyproject.toml").is_file() and (SOURCE_DIR / "CMakeLists.txt").is_file()


def uses_build_dir() -> bool:
    """True when the libraries come from a CMake build folder (a checkout, or ``$FUSEDOPS_BUILD_DIR``), not the
    installed package."""
    return bool(os.environ.get("FUSEDOPS_BUILD_DIR")) or source_checkout()


def library_dir() -> Path:
    """The folder the libraries are loaded from (see the module docstring)."""
    return build_dir() / "lib" if uses_build_dir() else PACKAGE_LIB_DIR


def library_path(name: str = "fusedops") -> Path | None:
    """Path of ``lib<name>.so`` in ``library_dir()``, or None if it is not there."""
    path = library_dir() / f"lib{name}.so"
    return path if path.is_file() else None


def missing_library(file_name: str, build_hint: str) -> str:
    """One line for a missing library: where it was looked for and the fix that applies here (``build_hint`` in a
    checkout; an installed package cannot build, it was installed incomplete)."""
    if uses_build_dir():
        return f"{file_name} not found in {library_dir()}; {build_hint}"
    return (f"{file_name} is missing from {library_dir()}: this fusedops installation is incomplete; reinstall it "
            "(pip install --force-reinstall <the fusedops source or wheel>)")


def configure_command(cuda: str | bool = "auto") -> list[str]:
    mode = _CUDA_MODES.get(cuda.lower() if isinstance(cuda, str) else cuda)
    if mode is None:
        raise FusedopsError(f"cuda must be 'auto', 'on' or 'off', got {cuda!r}")
    cmd = ["cmake", "-S", str(SOURCE_DIR), "-B", str(build_dir()), "-DCMAKE_BUILD_TYPE=Release",
           f"-DFUSEDOPS_CUDA={mode}"]
    if shutil.which("ninja") and not (build_dir() / "CMakeCache.txt").is_file():
        cmd += ["-G", "Ninja"]  # the generator of an existing build folder cannot change
    for var in _HEADER_VARS:
        if os.environ.get(var):
            cmd.append(f"-D{var}={os.environ[var]}")
    torch_dir = torch_cmake_dir()
    if torch_dir:
        cmd.append(f"-DTorch_DIR={torch_dir}")
    return cmd


def torch_cmake_dir() -> str | None:
    """PyTorch's CMake package folder (``torch.utils.cmake_prefix_path``/Torch), for the C++ ops; None without torch."""
    try:
        import torch.utils  # lazy: optional here; build-native and the ORT / TensorRT libraries need no torch
    except ImportError:
        return None
    path = Path(torch.utils.cmake_prefix_path) / "Torch"
    return str(path) if path.is_dir() else None


def build(cuda: str | bool = "auto", targets: list[str] | None = None, verbose: bool = False) -> Path:
    """Configure and build the native libraries; returns the folder holding them (``<build_dir>/lib``).

    ``cuda``: "auto" builds the CUDA kernels when nvcc and cuBLASLt are found, "on" requires them, "off" skips them.
    ``targets``: CMake targets to build (default: all). Raises FusedopsError with the tail of the log on failure.
    """
    if not source_checkout():
        raise FusedopsError(f"build-native builds from a repository checkout (plugins/CMakeLists.txt); this "
                            f"installed package carries the libraries pip built, in {PACKAGE_LIB_DIR}")
    if shutil.which("cmake") is None:
        raise FusedopsError("cmake not found on PATH; it is needed to build the native libraries")
    build_dir().mkdir(parents=True, exist_ok=True)
    _run(configure_command(cuda), "configure", verbose)
    cmd = ["cmake", "--build", str(build_dir()), "-j", str(os.cpu_count() or 2)]
    for t in targets or []:
        cmd += ["--target", t]
    _run(cmd, "build", verbose)
    return build_dir() / "lib"


def _run(cmd: list[str], what: str, verbose: bool) -> None:
    if verbose:
        print("+", " ".join(cmd), file=sys.stderr)
        proc = subprocess.run(cmd)
        if proc.returncode != 0:
            raise FusedopsError(f"native {what} failed (exit {proc.returncode}); see the output above")
        return
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-25:])
        raise FusedopsError(f"native {what} failed (exit {proc.returncode}):\n{tail}")
