"""The ctypes mirrors of the C ABI's structs (plugins/abi.py) have the C layout: a probe compiled against
plugins/include/fusedops/fusedops.h prints each struct's size and every field's offset, and they must equal ctypes'.
A field added on one side only (as plan options grow) would otherwise shift what C reads past the Python struct."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from fusedops.plugins import abi

INCLUDE = Path(__file__).resolve().parents[1] / "plugins" / "include"
MIRRORS = {  # ctypes class -> C typedef
    abi.Step: "fusedops_step", abi.Chain: "fusedops_chain", abi.GroupNormDesc: "fusedops_groupnorm_desc",
    abi.GemmDesc: "fusedops_gemm_desc", abi.ConvDesc: "fusedops_conv_desc", abi.OpDesc: "fusedops_op_desc",
    abi.ConvAttributes: "fusedops_conv_attributes", abi.Attributes: "fusedops_attributes",
    abi.TensorDesc: "fusedops_tensor_desc", abi._Options: "fusedops_plan_options",
    abi.GemmDevice: "fusedops_gemm_device",
}


def _probe_source() -> str:
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "fusedops/fusedops.h"', "int main(void) {"]
    for cls, c_name in MIRRORS.items():
        lines.append(f'  printf("{c_name} size %zu\\n", sizeof({c_name}));')
        for field in cls._fields_:
            lines.append(f'  printf("{c_name} {field[0]} %zu\\n", offsetof({c_name}, {field[0]}));')
    return "\n".join(lines + ["  return 0;", "}"])


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler on PATH to compile the layout probe")
    d = tmp_path_factory.mktemp("abi_layout")
    (d / "probe.c").write_text(_probe_source())
    build = subprocess.run([cc, "-std=c11", f"-I{INCLUDE}", str(d / "probe.c"), "-o", str(d / "probe")],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr  # a mirrored field the header lacks fails here, by name
    out = subprocess.run([str(d / "probe")], capture_output=True, text=True, check=True).stdout
    return {(name, what): int(value) for name, what, value in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("cls", list(MIRRORS), ids=lambda c: MIRRORS[c])
def test_ctypes_mirror_has_the_c_layout(c_layout, cls):
    c_name = MIRRORS[cls]
    assert ctypes.sizeof(cls) == c_layout[(c_name, "size")], f"{c_name}: a field on one side only?"
    for field in cls._fields_:
        assert getattr(cls, field[0]).offset == c_layout[(c_name, field[0])], (c_name, field[0])
