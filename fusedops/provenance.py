"""Where a measurement or report came from: package versions, date and device, recorded in every JSON report.

Versions are read from the installed distributions' metadata (importlib.metadata), so nothing heavy is imported."""

from __future__ import annotations

import datetime as _dt
import platform
from importlib import metadata

from .version import __version__

DISTRIBUTIONS = ("torch", "onnx", "onnxruntime", "onnxruntime-gpu", "onnxscript", "tensorrt")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def provenance(device: str | None = None) -> dict:
    """{"fusedops", "torch", "onnx", "onnxruntime", ..., "date", "device", "python", "machine"}; a package that is
    not installed is absent. ``device``: the GPU's name (or "cpu"); None: not stated by the caller."""
    out = {"fusedops": __version__}
    for dist in DISTRIBUTIONS:
        v = _version(dist)
        if v is not None:
            out[dist] = v
    out["date"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    out["device"] = device
    out["python"] = platform.python_version()
    out["machine"] = platform.machine()
    return out
