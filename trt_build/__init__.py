"""TensorRT engines from fused ONNX models: ``builder`` (build_engine, CLI arguments), ``runtime`` (Engine, verify),
``harness`` (the headers-only plugin harness driver). Importing this package does not import TensorRT."""
