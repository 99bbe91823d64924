"""Test-only TensorRT plugin harness: the C++ harness, its stand-ins (built by CMakeLists.txt here, added from
plugins/trt) and its Python driver (``driver``)."""
