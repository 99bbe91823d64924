"""Where a kernel's warps stall, from Nsight Compute's per-instruction source page (SASS, with stall sampling):

    ncu --section SourceCounters --section WarpStateStats -o prof ...   # on the GPU machine
    ncu -i prof.ncu-rep --page source --csv --print-source sass > sass.csv
    python tools/sass_hotspots.py sass.csv [TOP] [--region NAME=START:END ...] [--per N]

Prints the stall samples summed by opcode (HGMMA, SHFL, LDL, STG, BRX, ...) and the TOP instructions with the most
samples, with their address (and offset from the kernel's first instruction) and text. Each --region (hex offsets
from the first instruction, END excluded) adds its share of the samples, the warp instructions it executed divided
by --per (e.g. consumer warps x tiles: instructions a warp a tile) and its top stall reasons (the stall_* columns).
--roles splits a warp-specialised kernel (setmaxnreg) at its own anchors, as ptxas lays out this project's
ConvTranspose wgmma kernel: prologue up to USETMAXREG.TRY_ALLOC (the consumers'), consumer mainloop up to the first
BAR.SYNC after the last HGMMA, consumer epilogue up to USETMAXREG.DEALLOC, producers after it; the anchors are
printed so a different layout shows. Column names are matched loosely (they differ between ncu versions).
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys


def _column(header: list[str], *needles: str) -> int | None:
    for i, name in enumerate(header):
        low = name.lower()
        if all(n in low for n in needles):
            return i
    return None


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def _opcode(text: str) -> str:
    words = text.split()
    if words and words[0].startswith("@"):  # predicated: the opcode is the next word
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def _region(text: str) -> tuple[str, int, int]:
    try:
        name, span = text.split("=", 1)
        lo, hi = span.split(":", 1)
        return name, int(lo, 16), int(hi, 16)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--region {text!r}: expected NAME=START:END in hex offsets") from e


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    ap = argparse.ArgumentParser(prog="sass_hotspots.py")
    ap.add_argument("csv")
    ap.add_argument("top", nargs="?", type=int, default=30)
    ap.add_argument("--region", type=_region, action="append", default=[])
    ap.add_argument("--per", type=float, default=1.0)
    ap.add_argument("--roles", action="store_true")
    a = ap.parse_args(argv)
    with open(a.csv, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r) and
                  any("Address" in c for c in r)), None)
    if start is None:
        print(f"sass_hotspots: no SASS source table in {a.csv} (first line: {rows[0][:4] if rows else 'empty'})")
        return 1
    header = rows[start]
    src = header.index("Source") if "Source" in header else _column(header, "source")
    addr = _column(header, "address")
    samples = _column(header, "stall sampling", "all")
    executed = _column(header, "instructions executed")
    if samples is None:
        print(f"sass_hotspots: no stall-sampling column among {header}")
        return 1
    body = [r for r in rows[start + 1:] if len(r) == len(header)]
    total = sum(_number(r[samples]) for r in body) or 1.0
    by_op: collections.Counter = collections.Counter()
    for r in body:
        by_op[_opcode(r[src])] += _number(r[samples])

    def offset(r: list[str]) -> int | None:
        try:
            return int(r[addr], 16) - int(body[0][addr], 16)
        except (TypeError, ValueError, IndexError):
            return None

    print(f"stall samples: {total:.0f} over {len(body)} instructions; by opcode (share):")
    print("  " + ", ".join(f"{op} {n / total:.1%}" for op, n in by_op.most_common(16)))
    print(f"top {a.top} instructions (samples share, executed, address, offset, SASS):")
    for r in sorted(body, key=lambda r: -_number(r[samples]))[:a.top]:
        ex = r[executed] if executed is not None else "-"
        off = offset(r)
        print(f"  {_number(r[samples]) / total:6.2%} {ex:>10} {r[addr] if addr is not None else '-':>8} "
              f"{'+%x' % off if off is not None else '-':>8}  {r[src].strip()[:110]}")
    stalls = [(i, name) for i, name in enumerate(header)
              if name.startswith("stall_") and "not issued" not in name.lower()]
    regions = list(a.region)
    if a.roles:
        anchors = _role_anchors([(offset(r), r[src]) for r in body])
        if anchors is None:
            print("roles: no USETMAXREG.TRY_ALLOC / HGMMA / BAR.SYNC / USETMAXREG.DEALLOC anchors in this kernel")
            return 1
        alloc, epi, dealloc, end = anchors
        print(f"roles: anchors TRY_ALLOC +{alloc:x}, first BAR.SYNC after the last HGMMA +{epi:x}, DEALLOC "
              f"+{dealloc:x}")
        regions += [("prologue", 0, alloc), ("mainloop", alloc, epi), ("epilogue", epi, dealloc),
                    ("producers", dealloc, end)]
    for name, lo, hi in regions:
        inside = [r for r in body if (o := offset(r)) is not None and lo <= o < hi]
        share = sum(_number(r[samples]) for r in inside) / total
        ex = sum(_number(r[executed]) for r in inside) if executed is not None else float("nan")
        print(f"region {name} [+{lo:x}, +{hi:x}): {len(inside)} instructions, {share:.1%} of the samples, "
              f"{ex:.0f} executed, {ex / a.per:.0f} per {a.per:g}")
        reasons = sorted(((sum(_number(r[i]) for r in inside), n[len("stall_"):]) for i, n in stalls), reverse=True)
        got = sum(v for v, _ in reasons) or 1.0
        if reasons and reasons[0][0] > 0:
            print("  stalls: " + ", ".join(f"{n} {v / got:.0%}" for v, n in reasons[:5] if v > 0))
    return 0


def _role_anchors(code: list[tuple[int | None, str]]) -> tuple[int, int, int, int] | None:
    """(TRY_ALLOC, epilogue start, DEALLOC, end) offsets of a setmaxnreg kernel, or None without those anchors."""
    def first(pred, after: int = -1) -> int | None:
        return next((o for o, t in code if o is not None and o > after and pred(t)), None)
    alloc = first(lambda t: "USETMAXREG.TRY_ALLOC" in t)
    dealloc = first(lambda t: "USETMAXREG.DEALLOC" in t)
    hgmma = [o for o, t in code if o is not None and "HGMMA" in t and (dealloc is None or o < dealloc)]
    if alloc is None or dealloc is None or not hgmma:
        return None
    epi = first(lambda t: "BAR.SYNC" in t, max(hgmma))  # a predicate in front does not hide it
    if epi is None or not alloc < epi < dealloc:
        return None
    end = max(o for o, _ in code if o is not None) + 16
    return alloc, epi, dealloc, end



if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
