"""Where the native libraries are loaded from (a checkout's build folder, an installed package's lib folder) and how
the PyTorch ops are chosen or built for the running torch (plugins/torch_ops_build.py), without building a wheel:
tests/test_wheel.py does that end to end."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

from fusedops.errors import FusedopsError
from fusedops.plugins import native, torch_ops_build

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def installed_layout(monkeypatch, tmp_path):
    """This checkout made to look like an installed package: libraries in a package lib folder, a private cache."""
    lib_dir = tmp_path / "site" / "fusedops" / "plugins" / "lib"
    lib_dir.mkdir(parents=True)
    c_abi = native.library_path("fusedops")
    if c_abi is None:
        pytest.skip("libfusedops.so is not built here (fusedops build-native)")
    shutil.copy2(c_abi, lib_dir / "libfusedops.so")
    monkeypatch.delenv("FUSEDOPS_BUILD_DIR", raising=False)
    monkeypatch.setattr(native, "source_checkout", lambda: False)
    monkeypatch.setattr(native, "PACKAGE_LIB_DIR", lib_dir)
    monkeypatch.setenv("FUSEDOPS_CACHE_DIR", str(tmp_path / "cache"))
    return lib_dir


def test_checkout_loads_from_the_build_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("FUSEDOPS_BUILD_DIR", raising=False)
    assert native.source_checkout()
    assert native.library_dir() == ROOT / "build" / "native" / "lib"
    monkeypatch.setenv("FUSEDOPS_BUILD_DIR", str(tmp_path / "b"))
    assert native.library_dir() == (tmp_path / "b" / "lib").resolve()
    assert native.library_path("fusedops") is None  # nothing built there: not silently taken from elsewhere


def test_installed_package_loads_from_its_lib_folder(installed_layout):
    assert native.library_dir() == installed_layout
    assert native.library_path("fusedops") == installed_layout / "libfusedops.so"
    assert native.library_path("fusedops_ort") is None


def test_build_native_refuses_outside_a_checkout(installed_layout):
    with pytest.raises(FusedopsError, match="builds from a repository checkout.*plugins/lib"):
        native.build(cuda="off")


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("FUSEDOPS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert torch_ops_build.cache_dir() == tmp_path / "xdg" / "fusedops"
    monkeypatch.setenv("FUSEDOPS_CACHE_DIR", str(tmp_path / "mine"))
    assert torch_ops_build.cache_dir() == (tmp_path / "mine").resolve()


def _packaged_torch_ops(lib_dir: Path, torch_version: str) -> Path:
    built = ROOT / "build" / "native" / "lib" / "libfusedops_torch.so"
    if not built.is_file():
        pytest.skip("libfusedops_torch.so is not built here (fusedops build-native)")
    shutil.copy2(built, lib_dir / "libfusedops_torch.so")
    info = {"torch_version": torch_version, "cxx11_abi": int(torch.compiled_with_cxx11_abi())}
    (lib_dir / torch_ops_build.BUILD_INFO_FILE).write_text(json.dumps(info))
    return lib_dir / "libfusedops_torch.so"


def test_packaged_torch_ops_are_used_for_the_torch_they_were_built_for(installed_layout):
    packaged = _packaged_torch_ops(installed_layout, torch.__version__)
    assert torch_ops_build.library() == packaged


def test_packaged_torch_ops_for_another_torch_are_rebuilt_not_loaded(installed_layout, monkeypatch):
    _packaged_torch_ops(installed_layout, "2.0.0+other")
    # The build for this torch is attempted (and stops at the missing compiler) instead of loading the other build.
    monkeypatch.setenv("CXX", str(installed_layout / "no-such-compiler"))
    with pytest.raises(FusedopsError, match=r"built for torch .* on first use, but no C\+\+ compiler was found"):
        torch_ops_build.library()


def test_missing_packaged_c_abi_is_a_clear_error(installed_layout):
    (installed_layout / "libfusedops.so").unlink()
    with pytest.raises(FusedopsError, match="libfusedops.so is missing .* reinstall"):
        torch_ops_build.library()


def test_concurrent_first_uses_build_once(installed_layout, monkeypatch):
    """Two threads (as two processes would) ask for the ops at once: one builds, the other waits on the lock and
    takes the result."""
    calls = []

    def fake_build(target: Path, c_abi: Path) -> None:
        calls.append(target)
        time.sleep(0.3)
        target.mkdir(parents=True, exist_ok=True)
        (target / torch_ops_build.LIBRARY_FILE).write_bytes(b"built once")

    monkeypatch.setattr(torch_ops_build, "_build", fake_build)
    results = []
    threads = [threading.Thread(target=lambda: results.append(torch_ops_build.library())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 2 and results[0] == results[1]
    assert results[0].read_bytes() == b"built once"


def test_cache_key_changes_with_the_c_abi_library(installed_layout):
    """A reinstalled package (another libfusedops.so) gets its own build of the ops, never one linked to the old."""
    c_abi = installed_layout / "libfusedops.so"
    first = torch_ops_build._cache_key(c_abi)
    assert torch_ops_build._cache_key(c_abi) == first
    c_abi.write_bytes(c_abi.read_bytes() + b"\0")
    assert torch_ops_build._cache_key(c_abi) != first


def test_missing_library_names_the_fix_for_this_kind_of_install(installed_layout, monkeypatch):
    """An installed package cannot build: a missing library says to reinstall, and build_library says why it cannot
    build instead of failing on a script the package does not ship."""
    import fusedops.ort as fo

    with pytest.raises(FusedopsError, match=r"libfusedops_ort.so is missing from .*plugins/lib.* reinstall"):
        fo.library_path()
    with pytest.raises(FusedopsError, match="builds from a repository checkout"):
        fo.build_library(cuda="off")
    monkeypatch.setattr(native, "source_checkout", lambda: True)
    monkeypatch.setenv("FUSEDOPS_BUILD_DIR", str(installed_layout.parent / "empty-build"))
    with pytest.raises(FusedopsError, match=r"libfusedops_ort.so not found in .*empty-build.*build_library"):
        fo.library_path()


def test_unwritable_cache_folder_is_one_clear_error(installed_layout, monkeypatch, tmp_path):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    monkeypatch.setenv("FUSEDOPS_CACHE_DIR", str(not_a_folder))
    with pytest.raises(FusedopsError, match=r"cannot build the PyTorch ops in the cache folder .*a-file.*"
                                            r"FUSEDOPS_CACHE_DIR"):
        torch_ops_build.library()
