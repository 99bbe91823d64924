"""Typed attribute values of a fused node: an INT, FLOAT or INTS value checked for its ONNX type, with a
CatalogError naming the op and the attribute (``fusedops.catalog`` and ``fusedops.convtranspose`` read nodes with
them)."""

from __future__ import annotations

import numpy as np

from .chain_syntax import quote
from .errors import CatalogError


def type_name(v) -> str:
    """v's type in the words of ONNX attribute types (for messages)."""
    return {str: "STRING", bytes: "STRING (bytes)", float: "FLOAT", int: "INT", bool: "bool",
            list: "a list", tuple: "a tuple"}.get(type(v), type(v).__name__)


def int_attr(op: str, name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise CatalogError(f"{op}: attribute {quote(name)} must be an INT, got {type_name(v)}")
    return int(v)


def float_attr(op: str, name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise CatalogError(f"{op}: attribute {quote(name)} must be a FLOAT, got {type_name(v)}")
    return float(v)


def ints_attr(op: str, name: str, v) -> tuple[int, ...]:
    """A list / tuple / 1-D integer array of ints (what onnx, onnx-ir and callers hand over) as a tuple."""
    if isinstance(v, np.ndarray) and v.ndim == 1 and np.issubdtype(v.dtype, np.integer):
        return tuple(int(x) for x in v)
    if not isinstance(v, (list, tuple)) or any(isinstance(x, bool) or not isinstance(x, (int, np.integer))
                                               for x in v):
        raise CatalogError(f"{op}: attribute {quote(name)} must be an INTS (a list of ints), got {type_name(v)}")
    return tuple(int(x) for x in v)
