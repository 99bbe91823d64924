"""The channel reductions of the ``reduce`` attribute: parsing and the PyTorch reference."""

from __future__ import annotations

import torch

from .chain_syntax import _ascii_text, _strip, quote
from .errors import CatalogError
from .spec import tables as _spec


REDUCE_CODES = dict(_spec.REDUCES)


def parse_reduce(text) -> str:
    """The reduce attribute (str or UTF-8 bytes, surrounding whitespace ignored) as a REDUCE_CODES key."""
    if text is None:
        return ""
    t = _strip(_ascii_text(text, "reduce"))
    if t not in REDUCE_CODES:
        raise CatalogError(f"unknown reduce {quote(t)}; expected one of "
                           f"{', '.join(quote(k) for k in REDUCE_CODES)}")
    return t


def apply_reduce(y: torch.Tensor, reduce: str, dim: int = 1) -> torch.Tensor:
    if reduce == "":
        return y
    if reduce == "min":
        return torch.amin(y, dim=dim, keepdim=True)  # propagates NaN, like torch.min
    if reduce == "max":
        return torch.amax(y, dim=dim, keepdim=True)
    if reduce == "sum":
        return torch.sum(y, dim=dim, keepdim=True)
    if reduce == "mean":
        return torch.mean(y, dim=dim, keepdim=True)
    if reduce == "logsumexp":
        return torch.logsumexp(y, dim=dim, keepdim=True)
    raise CatalogError(f"unknown reduce {reduce!r}")
