"""The chain grammar's lexical layer: numbers, whitespace, quoting of user text in messages, float32 rounding.
The parser itself (steps and their parameters) is ``catalog.parse_chain``."""

from __future__ import annotations

import math
import struct

import torch

from .errors import CatalogError
from .spec import tables as _spec

# ---- Chain grammar (the same language as plugins/csrc/core/chain.cpp; tests/test_hostile_chain.py runs both over
# one corpus and a differential fuzz). Linear-time hand-written scanners, no regular expressions:
#   chain  := ws* [ step (";" step)* ] ws*          at most MAX_CHAIN_BYTES bytes, ASCII only
#   step   := ws* name ws* [ "(" [ arg ("," arg)* ] ")" ] ws*      name := [a-z_]+
#   arg    := ws* ( number | "@" digit+ ) ws*
#   number := [+-]? ( "inf" | ( digit+ [ "." digit* ] | "." digit+ ) [ [eE] [+-]? digit+ ] )
#   ws     := " " | "\t" | "\n" | "\r" | "\f" | "\v"
# Numbers are parsed as double and rounded to float32 (chains run in float32); a finite literal that rounds to
# infinity is rejected. Parameters follow the spec's rules: finite unless allow_inf (hardtanh's bounds, which must be
# ordered: min <= max); nonzero ones (softplus beta) != 0.
MAX_CHAIN_BYTES = _spec.MAX_CHAIN_BYTES
_WS = " \t\n\r\f\v"
_DIGITS = "0123456789"
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz_"
_QUOTE_LIMIT = 80  # characters of user text echoed in a message


def quote(text: str, limit: int = _QUOTE_LIMIT) -> str:
    """Single-quoted, escaped (one line, printable ASCII) and shortened user text for messages; chain.cpp's
    quote() produces the same bytes."""
    out = []
    for ch in text[:limit]:
        o = ord(ch)
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif 0x20 <= o < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
    return "'" + "".join(out) + ("...'" if len(text) > limit else "'")


def _ascii_text(text, what: str) -> str:
    """``text`` (str or UTF-8 bytes) as an ASCII str, at most MAX_CHAIN_BYTES bytes; CatalogError naming the first
    byte that is not printable ASCII or whitespace. Offsets are byte offsets (they equal character offsets up to
    the first non-ASCII character)."""
    if isinstance(text, (bytes, bytearray)):
        raw = bytes(text)
    elif isinstance(text, str):
        raw = text.encode("utf-8", "surrogatepass")
    else:
        raise CatalogError(f"{what} must be a string, got {type(text).__name__}")
    if len(raw) > MAX_CHAIN_BYTES:
        raise CatalogError(f"{what} is longer than {MAX_CHAIN_BYTES} bytes")
    for i, b in enumerate(raw):
        if b >= 0x80:
            raise CatalogError(f"{what} has a non-ASCII byte 0x{b:02x} at offset {i} (only ASCII is accepted)")
        if (b < 0x20 or b == 0x7F) and chr(b) not in _WS:
            raise CatalogError(f"{what} has a control character 0x{b:02x} at offset {i}")
    return raw.decode("ascii")


def _to_float32(v: float) -> float:
    """v rounded to float32 (as C's (float)v does); ±inf when it overflows."""
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def _strip(s: str) -> str:
    return s.strip(_WS)


def _number_syntax_ok(a: str) -> bool:
    i, n = 0, len(a)
    if i < n and a[i] in "+-":
        i += 1
    if a[i:] == "inf":
        return True
    int_digits = frac_digits = 0
    while i < n and a[i] in _DIGITS:
        i += 1
        int_digits += 1
    if i < n and a[i] == ".":
        i += 1
        while i < n and a[i] in _DIGITS:
            i += 1
            frac_digits += 1
    if int_digits == 0 and frac_digits == 0:
        return False
    if i < n and a[i] in "eE":
        i += 1
        if i < n and a[i] in "+-":
            i += 1
        exp_digits = 0
        while i < n and a[i] in _DIGITS:
            i += 1
            exp_digits += 1
        if exp_digits == 0:
            return False
    return i == n


def _parse_float(a: str, step: str) -> float:
    """A number token as a Python float whose float32 rounding is the value the runtimes use."""
    if not _number_syntax_ok(a):
        raise CatalogError(f"malformed number {quote(a)} in step {quote(step)}")
    v = float(a)  # linear in len(a); the text is bounded by MAX_CHAIN_BYTES
    if math.isinf(_to_float32(v)) and a.lstrip("+-") != "inf":
        raise CatalogError(f"number {quote(a)} in step {quote(step)} is out of float32 range (write inf)")
    return v


def _float_text(v: float) -> str:
    """Shortest text that round-trips the float32 value (chains are applied in float32)."""
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if math.isnan(v):
        raise CatalogError("NaN is not a valid chain parameter")
    f32 = float(torch.tensor(v, dtype=torch.float32))
    for digits in range(6, 10):
        s = f"{f32:.{digits}g}"
        if float(torch.tensor(float(s), dtype=torch.float32)) == f32:
            return s
    return repr(f32)
