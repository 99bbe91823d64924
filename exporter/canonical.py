"""Canonicalise a model before matching: onnxscript's constant folder and onnx-ir's identity elimination, so a
GroupNorm's weights (or a chain's constants) reached through Identity, Cast / CastLike, Reshape or Unsqueeze of
constants look like plain initializers to the rules.

Folding is bounded: only nodes whose inputs and outputs are small (at most ``FOLD_LIMIT`` elements) are evaluated,
so a large weight is never read or copied (a Cast of a 1 GB weight stays a Cast) and memory stays bounded.
Shape inference is not re-run here: ``fuse.infer_shapes`` ran ONNX's on the proto before.
"""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import onnxscript.optimizer

# Per-channel constants have C elements; 64K covers every channel count in practice and keeps the folder away from
# weights (the folder's own defaults are 8192 in, 262144 out).
FOLD_LIMIT = 1 << 16


def canonicalize(model: ir.Model) -> None:
    """Fold small constant subgraphs and remove Identity nodes, in place."""
    onnxscript.optimizer.fold_constants(model, onnx_shape_inference=False, input_size_limit=FOLD_LIMIT,
                                        output_size_limit=FOLD_LIMIT)
    common_passes.IdentityEliminationPass()(model)
    onnxscript.optimizer.remove_unused_nodes(model)
