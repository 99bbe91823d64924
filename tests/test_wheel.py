"""A wheel built from the repository works in a fresh virtual environment, from a folder outside the repository.

One module-scoped set-up (about 2.5 minutes on 2 shared cores, most of it installing torch and compiling):
  1. `pip wheel <repo>` with build isolation, CUDA off (what `pip install .` does; the build environment has no
     torch, so the wheel carries no PyTorch ops);
  2. a fresh venv with the pinned CPU torch (`FUSEDOPS_TORCH`, default torch==2.13.0, as scripts/dev.sh) and the wheel;
then the installed package is driven from a temporary folder, with the repository out of reach: `fusedops --version`,
`fusedops fuse` + an ONNX Runtime CPU session with the packaged library, and the PyTorch ops (built on first use into a
per-user cache, reused by the next process). The last test reinstalls with `--no-build-isolation`, which builds the
PyTorch ops into the package. Skips, with the reason, where cmake, a C++ compiler or the package index is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TORCH_REQUIREMENT = os.environ.get("FUSEDOPS_TORCH", "torch==2.13.0")
# pip's words for "the package index cannot be reached or lacks the package": the test skips on these, fails otherwise
OFFLINE_SIGNS = ("No matching distribution found", "Could not find a version that satisfies",
                 "NewConnectionError", "Temporary failure in name resolution", "Network is unreachable")


def _run(cmd, *, cwd, env=None, timeout=600, allow_offline_skip=False):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if proc.returncode != 0 and allow_offline_skip and any(s in proc.stdout for s in OFFLINE_SIGNS):
        pytest.skip(f"the package index is not reachable here (`{' '.join(map(str, cmd[:4]))} ...` could not fetch "
                    "its requirements)")
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-4000:]}"
    return proc.stdout


class Installed:
    """The fresh venv with the wheel, and how to run things in it from outside the repository."""

    def __init__(self, base: Path, venv: Path, wheel: Path, build_dir: Path):
        self.base, self.venv, self.wheel, self.build_dir = base, venv, wheel, build_dir
        self.python = venv / "bin" / "python"
        self.outside = base / "elsewhere"  # the working folder of every command: not the repository
        self.outside.mkdir(exist_ok=True)

    def env(self, cache: Path, **extra) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "FUSEDOPS_BUILD_DIR", "VIRTUAL_ENV", "PYTHONHOME")}
        env.update(FUSEDOPS_CACHE_DIR=str(cache), PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
                   **extra)
        return env

    def run(self, *args, cache: Path, check=True, **extra):
        proc = subprocess.run([str(a) for a in args], cwd=self.outside, env=self.env(cache, **extra),
                              capture_output=True, text=True, timeout=600)
        if check:
            assert proc.returncode == 0, f"{args}:\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        return proc

    def script(self, source: str, *, cache: Path, **extra):
        return self.run(self.python, "-c", textwrap.dedent(source), cache=cache, **extra)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not on PATH: the wheel's native libraries cannot be built here")
    if not (os.environ.get("CXX") or any(shutil.which(c) for c in ("c++", "g++", "clang++"))):
        pytest.skip("no C++ compiler (c++, g++, clang++ or $CXX): the wheel's native libraries cannot be built here")
    base = tmp_path_factory.mktemp("wheel")
    build_dir = base / "skbuild"  # kept for the --no-build-isolation rebuild, which then compiles only what changed
    _run([sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-w", base / "dist",
          "-C", "cmake.define.FUSEDOPS_CUDA=OFF", "-C", f"build-dir={build_dir}"],
         cwd=base, allow_offline_skip=True)
    (wheel,) = (base / "dist").glob("fusedops-*.whl")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=base)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q"]
    _run([*pip, TORCH_REQUIREMENT], cwd=base, allow_offline_skip=True)
    _run([*pip, wheel], cwd=base, allow_offline_skip=True)
    return Installed(base, venv, wheel, build_dir)


def test_wheel_holds_the_libraries_and_no_kernel_sources(installed):
    names = zipfile.ZipFile(installed.wheel).namelist()
    for lib in ("libfusedops.so", "libfusedops_ort.so"):
        assert f"fusedops/plugins/lib/{lib}" in names
    # What a first-use build of the PyTorch ops needs, and nothing of the kernel sources or the test harnesses.
    for src in ("fusedops/plugins/torch/fusedops_torch.cpp", "fusedops/plugins/torch/standalone/CMakeLists.txt",
                "fusedops/plugins/include/fusedops/fusedops.h"):
        assert src in names
    assert not [n for n in names if n.startswith(("fusedops/plugins/csrc/", "fusedops/plugins/trt/"))]
    # Built with build isolation: no torch in the build environment, so no PyTorch ops inside.
    assert "fusedops/plugins/lib/libfusedops_torch.so" not in names
    for pkg in ("models", "exporter", "plugins", "trt_build", "serve"):
        assert f"fusedops/{pkg}/__init__.py" in names
    assert installed.wheel.name.endswith("-py3-none-linux_x86_64.whl"), installed.wheel.name


def test_version_and_locations(installed):
    cache = installed.base / "cache-version"
    out = installed.run(installed.venv / "bin" / "fusedops", "--version", cache=cache).stdout.strip()
    from fusedops import __version__  # this checkout's version, which the wheel must carry
    assert out == f"fusedops {__version__}"
    info = json.loads(installed.script("""
        import json, importlib.metadata, fusedops, fusedops.ort
        from fusedops.plugins import native
        print(json.dumps({"package": fusedops.__file__, "lib_dir": str(native.library_dir()),
                          "ort": str(fusedops.ort.library_path()), "dist": importlib.metadata.version("fusedops"),
                          "checkout": native.source_checkout()}))
    """, cache=cache).stdout)
    site = installed.venv.resolve()
    assert Path(info["package"]).resolve().is_relative_to(site), info
    assert Path(info["lib_dir"]).resolve().is_relative_to(site) and Path(info["ort"]).is_file(), info
    assert info["dist"] == __version__ and info["checkout"] is False


def test_build_native_refuses_in_an_installed_package(installed):
    proc = installed.run(installed.venv / "bin" / "fusedops", "build-native", cache=installed.base / "c", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("fusedops: error:")]
    assert "repository checkout" in line and "plugins/lib" in line


def test_fuse_and_ort_session_with_the_packaged_library(installed):
    cache = installed.base / "cache-ort"
    out = installed.script("""
        import json, numpy as np, onnx, subprocess, sys
        from onnx import TensorProto, helper
        import fusedops.ort as fo

        C, G = 12, 3
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, 5])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", C, 5])
        rng = np.random.default_rng(14)
        scale, bias = rng.standard_normal(C) + 1.0, rng.standard_normal(C)
        inits = [helper.make_tensor("scale", TensorProto.FLOAT, [C], scale.astype(np.float32)),
                 helper.make_tensor("bias", TensorProto.FLOAT, [C], bias.astype(np.float32))]
        nodes = [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["gn"], num_groups=G, epsilon=1e-5),
                 helper.make_node("Relu", ["gn"], ["y"])]
        model = helper.make_model(helper.make_graph(nodes, "gn_relu", [x], [y], initializer=inits),
                                  opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
        onnx.save(model, "gn.onnx")
        subprocess.run(["fusedops", "fuse", "gn.onnx", "fused.onnx"], check=True)
        ops = [n.op_type for n in onnx.load("fused.onnx").graph.node]

        xv = rng.standard_normal((4, C, 5)) * 3 + 1
        before = fo.kernel_calls("cpu")
        (got,) = fo.run(fo.session("fused.onnx", providers=["CPUExecutionProvider"]), {"x": xv.astype(np.float32)})
        g = xv.reshape(4, G, -1)
        ref = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(xv.shape)
        ref = np.maximum(ref * scale[None, :, None] + bias[None, :, None], 0)
        print(json.dumps({"ops": ops, "calls": fo.kernel_calls("cpu") - before, "err": float(np.abs(got - ref).max()),
                          "library": str(fo.library_path())}))
    """, cache=cache).stdout.strip().splitlines()[-1]
    r = json.loads(out)
    assert r["ops"] == ["GroupNormAct"], r  # GroupNormalization + Relu became one fused node
    assert r["calls"] == 1, r  # ... and the library's CPU kernel ran it, not the function body
    assert r["err"] < 1e-4, r
    assert Path(r["library"]).resolve().is_relative_to(installed.venv.resolve()), r


TORCH_OP_CHECK = """
    import json, torch
    from fusedops.plugins import torch_ops, torch_ops_build

    g = torch.Generator().manual_seed(14)
    x = torch.randn(3, 8, 6, generator=g, dtype=torch.float64) * 2 + 0.5
    gamma, beta = torch.randn(8, generator=g, dtype=torch.float64) + 1, torch.randn(8, generator=g, dtype=torch.float64)
    y = torch_ops.group_norm_act(x.float(), gamma.float(), beta.float(), [], 4, 1e-5, "", "silu")
    ref = torch.nn.functional.silu(torch.nn.functional.group_norm(x, 4, gamma, beta, 1e-5))
    w = torch.randn(16, 10, generator=g, dtype=torch.float64)
    b = torch.randn(16, generator=g, dtype=torch.float64)
    xg = torch.randn(5, 10, generator=g, dtype=torch.float64)
    yg = torch_ops.gemm_group_norm_act(xg.float(), w.float(), b.float(), torch.ones(16), torch.zeros(16), [],
                                       num_groups=4, post="relu", allow_tf32=0)
    refg = torch.relu(torch.nn.functional.group_norm(xg @ w.T + b, 4))
    print(json.dumps({"err": float((y.double() - ref).abs().max()), "err_gemm": float((yg.double() - refg).abs().max()),
                      "library": str(torch_ops_build.library())}))
"""


def test_torch_ops_build_on_first_use_then_reuse(installed):
    cache = installed.base / "cache-torch"
    first = installed.script(TORCH_OP_CHECK, cache=cache)
    r = json.loads(first.stdout.strip().splitlines()[-1])
    assert "building the PyTorch ops for torch" in first.stderr, first.stderr
    assert r["err"] < 1e-5 and r["err_gemm"] < 1e-4, r
    lib = Path(r["library"])
    assert lib.is_file() and lib.resolve().is_relative_to(cache.resolve()), r
    second = installed.script(TORCH_OP_CHECK, cache=cache)
    assert "building the PyTorch ops" not in second.stderr, second.stderr  # the cached build is reused, not rebuilt
    assert json.loads(second.stdout.strip().splitlines()[-1])["library"] == r["library"]


def test_no_compiler_is_one_clear_error(installed):
    proc = installed.script("""
        import sys, torch
        from fusedops.errors import FusedopsError
        from fusedops.plugins import torch_ops
        try:
            torch_ops.load()
        except FusedopsError as e:
            print(e)
            sys.exit(3)
    """, cache=installed.base / "cache-nocxx", check=False, CXX=str(installed.base / "no-such-compiler"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no C++ compiler was found" in proc.stdout and "torch 2." in proc.stdout, proc.stdout


def test_no_build_isolation_puts_the_torch_ops_in_the_package(installed):
    """With torch importable by the build (`pip install --no-build-isolation`), the wheel build compiles the PyTorch
    ops against it, and the installed package loads them from inside itself: nothing is built on first use."""
    pip = [installed.python, "-m", "pip", "install", "-q"]
    _run([*pip, "scikit-build-core>=0.11,<2"], cwd=installed.base, allow_offline_skip=True)
    _run([*pip, "--no-build-isolation", "--no-deps", "--force-reinstall", ROOT, "-C", "cmake.define.FUSEDOPS_CUDA=OFF",
          "-C", f"build-dir={installed.build_dir}"], cwd=installed.base, env=installed.env(installed.base / "c"))
    cache = installed.base / "cache-packaged"
    proc = installed.script(TORCH_OP_CHECK, cache=cache)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "building the PyTorch ops" not in proc.stderr, proc.stderr
    assert r["err"] < 1e-5 and r["err_gemm"] < 1e-4, r
    lib = Path(r["library"])
    assert lib.parent.name == "lib" and lib.resolve().is_relative_to(installed.venv.resolve()), r
    torch_version = installed.script("import torch; print(torch.__version__)", cache=cache).stdout.strip()
    info = json.loads((lib.parent / "torch_ops_build.json").read_text())
    assert info["torch_version"] == torch_version, info  # the torch it was built against is recorded
    assert not (cache / "torch_ops").exists()  # nothing was built on first use
