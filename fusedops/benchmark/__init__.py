"""What ``fusedops bench`` measures (the API's ``fusedops.bench``; this package is not named ``bench`` so that the
function is never shadowed by a submodule).

    gpu.py       the throughput bench: eager, torch.compile, the floor and the fused models side by side
    latency.py   ``--latency``: per-call synchronous, enqueue, back-to-back and CUDA-graph times
    ort_rows.py  ONNX Runtime rows (unfused vs fused with the fusedops library)
    trt_rows.py  TensorRT rows (engines through trt_build's cache)
    timing.py    precision modes and CUDA-event timing
    results.py   rows, targets, ratios, the printed table, the default results folder (bench/results/)
    chart.py     the charts: ratios to the floor, target lines, legend
"""
