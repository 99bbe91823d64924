"""Export + fuse one already-built model instance (so the ONNX weights are exactly the eager model's)."""

from __future__ import annotations

from pathlib import Path

import onnx
import torch


def export_unfused_and_fused(model: torch.nn.Module, entry, size: str, unfused_path: Path, fused_path: Path,
                             dynamic_batch: bool = True) -> tuple[Path, Path]:
    from .exporter.export import export_module
    from .exporter.fuse import fuse_model

    # A batch of 2 is enough to trace (the batch dim is dynamic) and keeps model 4's example small.
    (example,) = entry.inputs(size, batch=2 if dynamic_batch else None)
    unfused = export_module(model, example, dynamic_batch=dynamic_batch)
    fused = fuse_model(unfused)
    onnx.checker.check_model(fused, full_check=True)
    onnx.save(unfused, str(unfused_path))
    onnx.save(fused, str(fused_path))
    return unfused_path, fused_path
