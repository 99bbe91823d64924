"""libfusedops_trt registers its creators when merely dlopen'ed (Triton's TensorRT backend, LD_PRELOAD), against a
stand-in libnvinfer.so.<major> that holds only a plugin registry (tests/trt_harness/stub_nvinfer.cpp), and still
works with IPluginRegistry::loadLibrary (getCreators hands the load-time registration back).

Needs the TensorRT headers and the CUDA runtime headers (like tests/test_trt_harness.py); skips with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from fusedops.errors import FusedopsError
from trt_harness import driver as H

# The ops the library registers: the spec's TensorRT ops (H.PLUGIN_OPS)
CREATORS = [f"fusedops::{name}/1" for name in H.PLUGIN_OPS]


@pytest.fixture(scope="module")
def built():
    if H.tensorrt_include_dir() is None:
        pytest.skip("TensorRT headers not found (third_party/tensorrt/include or TENSORRT_INCLUDE_DIR); "
                    "see scripts/get_tensorrt_headers.md")
    if shutil.which("cmake") is None:
        pytest.skip("cmake not found")
    try:
        build = H.build_harness()
    except FusedopsError as e:
        if "skipped the TensorRT plugin" in str(e):
            pytest.skip(f"plugin not configurable here: {e}")
        raise
    bdir = H.native_build_dir()
    targets = dict(line.split("=", 1) for line in (bdir / "fusedops_trt_targets.txt").read_text().split()
                   if "=" in line)
    subprocess.run(["cmake", "--build", str(bdir), "--target", targets["stub_registry"]], check=True,
                   capture_output=True, timeout=600)
    stub = bdir / targets["stub_registry_path"]
    assert stub.is_file()
    return build, stub


def _walk(built, load: str, env: dict | None = None, plugin=None) -> dict:
    build, stub = built
    r = subprocess.run([str(build.harness), "--plugin", str(plugin or build.plugin), "--registry-stub", str(stub),
                        "--registry-load", load], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("load", ["local", "global", "soname"])
def test_registers_on_dlopen_and_hands_over_to_load_library(built, load):
    """local: libnvinfer loaded RTLD_LOCAL before the plugin (Triton's TensorRT backend; found by RTLD_NOLOAD);
    global: in the global scope (trtexec; the weak reference); soname: not loaded yet (LD_PRELOAD; loaded by soname)."""
    env = {"LD_LIBRARY_PATH": str(built[1].parent)} if load == "soname" else None
    r = _walk(built, load, env)
    assert r["stub_loaded"]
    assert r["on_load"]["creators"] == CREATORS
    assert r["after_get_creators"]["creators"] == []  # handed back for the caller to register
    assert r["load_library_registered"] and r["after_load_library"]["creators"] == CREATORS


def test_nothing_registered_without_tensorrt_in_the_process(built):
    r = _walk(built, "soname", {"LD_LIBRARY_PATH": ""})  # no libnvinfer reachable: the plugin still loads
    assert not r["stub_loaded"]


def test_auto_registration_can_be_turned_off(built):
    r = _walk(built, "local", {"FUSEDOPS_TRT_AUTO_REGISTER": "0"})
    assert r["on_load"]["creators"] == [] and r["on_load"]["registrations"] == 0
    assert r["load_library_registered"] and r["after_load_library"]["creators"] == CREATORS


def test_exports_stay_two_and_libnvinfer_is_not_linked(built):
    build, _ = built
    if shutil.which("nm") is None or shutil.which("readelf") is None:
        pytest.skip("binutils (nm, readelf) not found")
    defined = subprocess.run(["nm", "-D", "--defined-only", str(build.plugin)], capture_output=True, text=True,
                             check=True).stdout
    names = sorted(line.split()[-1] for line in defined.splitlines() if " T " in line)
    assert names == ["getCreators", "setLoggerFinder"]
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(build.plugin)], capture_output=True, text=True,
                               check=True).stdout
    assert any(line.split() == ["w", "getPluginRegistry"] for line in undefined.splitlines()), undefined
    needed = subprocess.run(["readelf", "-d", str(build.plugin)], capture_output=True, text=True, check=True).stdout
    assert "libnvinfer" not in needed
