"""Where a kernel's warps stall, from Nsight Compute's per-instruction source page (SASS, with stall sampling):

    ncu --section SourceCounters --section WarpStateStats -o prof ...   # on the GPU machine
    ncu -i prof.ncu-rep --page source --csv --print-source sass > sass.csv
    python tools/sass_hotspots.py sass.csv [TOP]

Prints the stall samples summed by opcode (HGMMA, SHFL, LDL, STG, BRX, ...) and the TOP instructions with the most
samples, with their address and text. Column names are matched loosely (they differ between ncu versions).
"""

from __future__ import annotations

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


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    top = int(argv[1]) if len(argv) > 1 else 30
    with open(argv[0], newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r) and
                  any("Address" in c for c in r)), None)
    if start is None:
        print(f"sass_hotspots: no SASS source table in {argv[0]} (first line: {rows[0][:4] if rows else 'empty'})")
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
        op = r[src].strip().split(" ")[0] if r[src].strip() else "?"
        if op.startswith("@"):  # predicated: the opcode is the next word
            parts = r[src].strip().split(" ")
            op = parts[1] if len(parts) > 1 else op
        by_op[op.split(".")[0]] += _number(r[samples])
    print(f"stall samples: {total:.0f} over {len(body)} instructions; by opcode (share):")
    print("  " + ", ".join(f"{op} {n / total:.1%}" for op, n in by_op.most_common(16)))
    print(f"top {top} instructions (samples share, executed, address, SASS):")
    for r in sorted(body, key=lambda r: -_number(r[samples]))[:top]:
        ex = r[executed] if executed is not None else "-"
        print(f"  {_number(r[samples]) / total:6.2%} {ex:>10} {r[addr] if addr is not None else '-':>8}  "
              f"{r[src].strip()[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
