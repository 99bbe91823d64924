"""The package version, in one place (the CLI's --version, provenance in reports, the fused ONNX's metadata)."""

__version__ = "0.1.0"
