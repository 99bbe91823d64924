"""tools/sass_loops.py: loops found in a `cuobjdump -sass` listing (a synthetic one: no nvcc or cuobjdump needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("sass_loops", Path(__file__).parent.parent / "tools" / "sass_loops.py")
sass_loops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_loops)

LISTING = """
        code for sm_90a
                Function : kernel_a
        /*0000*/                   MOV R1, c[0x0][0x28] ;        /* 0x00000a0000017a02 */
        /*0010*/                   HGMMA.64x128x8.F32.TF32 R24, R104, gdesc[UR16], RZ ;
        /*0020*/                   FADD R2, R2, R3 ;
        /*0030*/              @!P0 BRA 0x10 ;
        /*0040*/                   LDS R5, [R4] ;
        /*0050*/                   IADD3 R4, R4, 0x1, RZ ;
        /*0060*/               @P1 BRA 0x40 ;
        /*0070*/                   BRA 0x0 ;
        /*0080*/                   EXIT ;
                Function : kernel_b
        /*0000*/                   FADD R2, R2, R3 ;
        /*0010*/                   BRA 0x0 ;
"""


def test_functions_and_loops_with_their_opcodes():
    funcs = dict(sass_loops.functions(LISTING))
    assert set(funcs) == {"kernel_a", "kernel_b"}
    assert len(funcs["kernel_a"]) == 9
    found = sass_loops.loops(funcs["kernel_a"], "HGMMA")
    # the inner loop 0x10-0x30 and the outer 0x0-0x70 hold the HGMMA; the LDS loop 0x40-0x60 does not
    assert [(b[0][0], b[-1][0], len(b)) for b in found] == [(0x10, 0x30, 3), (0x0, 0x70, 8)]
    assert [sass_loops.opcode(t) for _, t in found[0]] == ["HGMMA.64x128x8.F32.TF32", "FADD", "BRA"]
    assert [(b[0][0], len(b)) for b in sass_loops.loops(funcs["kernel_a"], "LDS")] == [(0x40, 3), (0x0, 8)]
    assert sass_loops.loops(funcs["kernel_b"], "HGMMA") == []


def test_main_reads_a_listing(tmp_path, capsys):
    path = tmp_path / "k.sass"
    path.write_text(LISTING)
    assert sass_loops.main(["--sass", str(path), "--body"]) == 0
    out = capsys.readouterr().out
    assert "kernel_a  loop 0x10-0x30: 3 instructions" in out
    assert "HGMMA.64x128x8.F32.TF32 1, FADD 1, BRA 1" in out
    assert "0x00020  FADD R2, R2, R3" in out
