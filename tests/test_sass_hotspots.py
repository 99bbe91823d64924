"""tools/sass_hotspots.py: stall samples of Nsight Compute's SASS source page, by opcode and by instruction."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sass_hotspots", ROOT / "tools" / "sass_hotspots.py")
sass_hotspots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_hotspots)

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"Instructions Executed"\n')


def test_samples_are_summed_by_opcode_and_the_top_lines_listed(tmp_path, capsys):
    csv = tmp_path / "sass.csv"
    csv.write_text('"ncu preamble"\n' + HEADER +
                   '"0x10","HGMMA.64x256x8.F32.TF32 R24, gdesc[UR8], R24","1,200","1000","50"\n'
                   '"0x20","@P0 SHFL.BFLY PT, R3, R2, 0x1, 0x1f","300","200","10"\n'
                   '"0x30","LDL R154, [R1+0x90]","500","400","40"\n')
    assert sass_hotspots.main([str(csv), "2"]) == 0
    out = capsys.readouterr().out
    assert "stall samples: 2000 over 3 instructions" in out
    assert "HGMMA 60.0%, LDL 25.0%, SHFL 15.0%" in out  # a predicate (@P0) is not the opcode
    top = out.split("top 2 instructions")[1].splitlines()[1:]
    assert len(top) == 2 and "HGMMA" in top[0] and "LDL" in top[1]


def test_a_file_without_the_table_is_named(tmp_path, capsys):
    csv = tmp_path / "other.csv"
    csv.write_text('"==PROF== error"\n')
    assert sass_hotspots.main([str(csv)]) == 1
    assert "no SASS source table" in capsys.readouterr().out


def test_predicates_padded_with_spaces_and_regions_by_offset(tmp_path, capsys):
    # ncu pads a predicate from its opcode with two spaces: "@!P1  BRA" is a BRA (it was once counted as "").
    csv = tmp_path / "sass.csv"
    csv.write_text(HEADER +
                   '"0x7f0000001000","HGMMA.64x128x16.F32.BF16 R88, gdesc[UR20], R88","100","90","72"\n'
                   '"0x7f0000001010","@!P0  BRA 0x7f0000001000","300","280","8"\n'
                   '"0x7f0000002000","FFMA R4, R88, R2, R3","600","500","5000"\n')
    assert sass_hotspots.main([str(csv), "1", "--region", "main=0:1000", "--region", "epi=1000:2000",
                               "--per", "10"]) == 0
    out = capsys.readouterr().out
    assert "FFMA 60.0%, BRA 30.0%, HGMMA 10.0%" in out
    assert "+1000  FFMA" in out  # the top line names its offset from the first instruction
    assert "region main [+0, +1000): 2 instructions, 40.0% of the samples, 80 executed, 8 per 10" in out
    assert "region epi [+1000, +2000): 1 instructions, 60.0% of the samples, 5000 executed, 500 per 10" in out


def test_a_malformed_region_is_named(tmp_path, capsys):
    csv = tmp_path / "sass.csv"
    csv.write_text(HEADER + '"0x10","NOP","1","1","1"\n')
    with pytest.raises(SystemExit):
        sass_hotspots.main([str(csv), "--region", "oops"])
    assert "expected NAME=START:END" in capsys.readouterr().err


def test_roles_split_a_warp_specialised_kernel_at_its_anchors(tmp_path, capsys):
    header = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_long_sb",'
              '"stall_wait","stall_long_sb (Not Issued)"\n')
    lines = [("0x1000", "LDC R1, c[0x0][0x28]", 10, 1, 0, 10),
             ("0x1010", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xa0", 5, 1, 0, 5),
             ("0x1020", "HGMMA.64x128x16.F32.BF16 R88, gdesc[UR20], R88", 40, 8, 0, 40),
             ("0x1030", "@!P0  BAR.SYNC.DEFER_BLOCKING R18, 0x80", 5, 1, 0, 5),  # predicated: still the anchor
             ("0x1040", "@P1 STG.E desc[UR34][R16.64], R5", 60, 64, 50, 10),
             ("0x1050", "USETMAXREG.DEALLOC.CTAPOOL 0x60", 20, 1, 20, 0),
             ("0x1060", "@!P1  BRA 0x1050", 60, 4, 60, 0)]
    csv = tmp_path / "sass.csv"
    csv.write_text(header + "".join(f'"{a}","{s}","{n}","{e}","{lsb}","{w}","999"\n'
                                    for a, s, n, e, lsb, w in lines))
    assert sass_hotspots.main([str(csv), "1", "--roles", "--per", "2"]) == 0
    out = capsys.readouterr().out
    assert "anchors TRY_ALLOC +10, first BAR.SYNC after the last HGMMA +30, DEALLOC +50" in out
    assert "region mainloop [+10, +30): 2 instructions, 22.5% of the samples, 9 executed, 4 per 2" in out
    assert "region epilogue [+30, +50): 2 instructions, 32.5% of the samples" in out
    assert "region producers [+50, +70): 2 instructions, 40.0% of the samples" in out
    # the epilogue's stall reasons from the stall_* columns, without the (Not Issued) duplicates
    epilogue = out.split("region epilogue")[1].splitlines()[1]
    assert epilogue.strip() == "stalls: long_sb 77%, wait 23%", epilogue


def test_roles_without_anchors_say_so(tmp_path, capsys):
    csv = tmp_path / "sass.csv"
    csv.write_text(HEADER + '"0x10","FFMA R4, R88, R2, R3","1","1","1"\n')
    assert sass_hotspots.main([str(csv), "--roles"]) == 1
    assert "no USETMAXREG.TRY_ALLOC" in capsys.readouterr().out
