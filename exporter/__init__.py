"""torch → ONNX → fused ONNX: ``export_model`` (torch's dynamo exporter), ``fuse_model`` (onnxscript-rewriter rules
that build ``fusedops`` nodes; ``fuse_model_with_report`` adds the fusion report), ``build_function`` (the
standard-op ONNX function body of one fused node)."""

from .export import export_model, export_module
from .functions import build_function
from .fuse import fuse_model, fuse_model_with_report, fusion_summary
from .report import FusionReport

__all__ = ["export_model", "export_module", "build_function", "fuse_model", "fuse_model_with_report",
           "fusion_summary", "FusionReport"]
