"""Export + fuse one already-built model instance (so the ONNX weights are exactly the eager model's)."""

from __future__ import annotations

from pathlib import Path

import onnx
import torch

from . import safe_output
from .exporter.export import export_module
from .exporter.fuse import fuse_model


def export_unfused_and_fused(model: torch.nn.Module, entry, size: str, unfused_path: Path, fused_path: Path,
                             dynamic_batch: bool = True, force: bool = False) -> tuple[Path, Path]:
    # A batch of 2 is enough to trace (the batch dim is dynamic) and keeps model 4's example small.
    (example,) = entry.inputs(size, batch=2 if dynamic_batch else None)
    unfused = export_module(model, example, dynamic_batch=dynamic_batch)
    fused = fuse_model(unfused)
    onnx.checker.check_model(fused, full_check=True)
    safe_output.write_bytes(unfused_path, unfused.SerializeToString(), force=force)
    safe_output.write_bytes(fused_path, fused.SerializeToString(), force=force)
    return unfused_path, fused_path
