"""TensorRT engines from fused ONNX models: ``builder`` (build_engine, CLI arguments), ``runtime`` (Engine, verify);
the headers-only plugin harness and its driver are test-only code in ``tests/trt_harness``. Importing this package
does not import TensorRT."""
