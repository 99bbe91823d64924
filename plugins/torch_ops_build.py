"""Find, or build once, ``libfusedops_torch.so`` for the torch this process imports.

    library() -> Path        the PyTorch ops library to load (FusedopsError naming the problem when there is none)
    cache_dir() -> Path      $FUSEDOPS_CACHE_DIR, else $XDG_CACHE_HOME/fusedops, else ~/.cache/fusedops

The ops are C++ against torch's C++ API, so they must be built against the very torch that loads them. Where they
come from, in order:

1. a development checkout: ``build/native/lib`` (or ``$FUSEDOPS_BUILD_DIR/lib``), from ``fusedops build-native``;
2. the installed package: ``fusedops/plugins/lib``, when pip built them against this torch (``pip install
   --no-build-isolation`` with torch present; ``torch_ops_build.json`` beside the library names that torch);
3. the per-user cache: built once per torch (and package) from the sources the package ships, with CMake and the
   torch's own CMake package (``plugins/torch/standalone``), linking the package's ``libfusedops.so``. A build-isolated
   wheel takes this path, so it never downloads a torch of its own. About 20 s on 2 cores; a second process waits
   for the first (file lock) and reuses its result.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.utils

from fusedops.errors import FusedopsError

from . import native

LIBRARY_FILE = "libfusedops_torch.so"
BUILD_INFO_FILE = "torch_ops_build.json"  # written by the wheel build beside a packaged library
_PLUGINS_DIR = Path(__file__).resolve().parent
_STANDALONE_DIR = _PLUGINS_DIR / "torch" / "standalone"


def cache_dir() -> Path:
    """Root of fusedops' per-user cache (the PyTorch ops built on first use live in ``torch_ops/`` under it)."""
    env = os.environ.get("FUSEDOPS_CACHE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "fusedops"


def library() -> Path:
    """The ``libfusedops_torch.so`` for this torch: development build, packaged build for this torch, or cache."""
    if native.uses_build_dir():
        path = native.library_path("fusedops_torch")
        if path is None:
            raise FusedopsError(f"the PyTorch ops (libfusedops_torch.so) are not built in {native.library_dir()}; "
                                "run `fusedops build-native` (it needs PyTorch's CMake package, which this torch "
                                "installation provides)")
        return path
    packaged = native.library_path("fusedops_torch")
    if packaged is not None and _built_for_this_torch(packaged.parent / BUILD_INFO_FILE):
        return packaged
    return _cached_or_built()


def _torch_identity() -> dict:
    return {"torch_version": torch.__version__, "cxx11_abi": int(torch.compiled_with_cxx11_abi())}


def _built_for_this_torch(info_path: Path) -> bool:
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        return False
    return info == _torch_identity()


def _cache_key(c_abi: Path) -> str:
    """Everything the built library depends on: this torch (version, ABI, where it is), this package's C ABI
    library (where, which build) and the sources the ops are built from."""
    h = hashlib.sha256()
    stat = c_abi.stat()
    h.update(json.dumps([_torch_identity(), str(Path(torch.__file__).resolve()), str(c_abi), stat.st_size,
                         stat.st_mtime_ns]).encode())
    sources = [*sorted((_PLUGINS_DIR / "include").rglob("*.h")), *sorted((_PLUGINS_DIR / "torch").rglob("*.cpp")),
               *sorted((_PLUGINS_DIR / "torch").rglob("CMakeLists.txt"))]
    for src in sources:
        h.update(str(src.relative_to(_PLUGINS_DIR)).encode())
        h.update(src.read_bytes())
    return h.hexdigest()[:16]


def _cached_or_built() -> Path:
    c_abi = native.library_path("fusedops")
    if c_abi is None:
        raise FusedopsError(native.missing_library("libfusedops.so", "build it with `fusedops build-native`"))
    tag = re.sub(r"[^A-Za-z0-9_.+-]", "_", torch.__version__)
    target = cache_dir() / "torch_ops" / f"torch-{tag}-{_cache_key(c_abi)}"
    path = target / LIBRARY_FILE
    if path.is_file():
        return path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.parent / f"{target.name}.lock"):
            if not path.is_file():  # another process may have built it while this one waited
                _build(target, c_abi)
    except OSError as e:  # an unwritable or odd cache folder: one line naming it, not a traceback
        raise FusedopsError(f"cannot build the PyTorch ops in the cache folder {target.parent}: "
                            f"{e.strerror or e}; set FUSEDOPS_CACHE_DIR to a writable folder") from None
    return path


@contextlib.contextmanager
def _locked(lock_path: Path):
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _toolchain() -> tuple[str, list[str]]:
    """cmake and the generator arguments; FusedopsError naming what is missing."""
    cmake = shutil.which("cmake")
    if cmake is None:
        with contextlib.suppress(ImportError, AttributeError):
            import cmake as cmake_pkg  # lazy: optional: the `cmake` wheel, when installed without its scripts on PATH

            cmake = str(Path(cmake_pkg.CMAKE_BIN_DIR) / "cmake")
    if cmake is None or not Path(cmake).is_file():
        raise FusedopsError(_cannot_build("cmake was not found (install it: pip install cmake)"))
    compiler = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if compiler is None or not compiler.split() or shutil.which(compiler.split()[0]) is None:  # CXX="ccache g++"
        raise FusedopsError(_cannot_build("no C++ compiler was found (install g++ or clang++, or set CXX)"))
    if shutil.which("ninja"):
        return cmake, ["-G", "Ninja"]
    if shutil.which("make"):
        return cmake, ["-G", "Unix Makefiles"]
    raise FusedopsError(_cannot_build("neither ninja nor make was found (pip install ninja)"))


def _cannot_build(why: str) -> str:
    return (f"the PyTorch ops must be built for torch {torch.__version__} on first use, but {why}; or install "
            "fusedops with this torch present: pip install --no-build-isolation <fusedops source>")


def _build(target: Path, c_abi: Path) -> None:
    cmake, generator = _toolchain()
    torch_dir = Path(torch.utils.cmake_prefix_path) / "Torch"
    work = target.parent / f"{target.name}.build-{os.getpid()}"
    log_path = target.parent / f"{target.name}.log"  # kept: the record of the build (or of why it failed)
    print(f"fusedops: building the PyTorch ops for torch {torch.__version__} into {target} (once per torch; "
          "about 20 s)", file=sys.stderr, flush=True)
    start = time.monotonic()
    steps = [[cmake, "-S", str(_STANDALONE_DIR), "-B", str(work), *generator, "-DCMAKE_BUILD_TYPE=Release",
              f"-DFUSEDOPS_LIBRARY={c_abi}", f"-DTorch_DIR={torch_dir}"],
             [cmake, "--build", str(work), "-j", str(os.cpu_count() or 2)]]
    try:
        with open(log_path, "w") as log:
            for cmd in steps:
                log.write("+ " + " ".join(cmd) + "\n")
                log.flush()
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
                if rc != 0:
                    log.close()
                    tail = "\n".join(log_path.read_text().strip().splitlines()[-15:])
                    raise FusedopsError(f"building the PyTorch ops for torch {torch.__version__} failed (exit {rc}; "
                                        f"full log: {log_path}):\n{tail}")
        target.mkdir(parents=True, exist_ok=True)
        # Renamed into place last: a process that finds the library finds it complete.
        os.replace(work / "lib" / LIBRARY_FILE, target / LIBRARY_FILE)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"fusedops: PyTorch ops built in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
