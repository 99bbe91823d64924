"""Serving fused models on Triton Inference Server.

    tritonserver.py `fusedops serve` (default): PyTriton's bundled tritonserver, the model in its Python-backend stub
    triton_model.py  that model (the repository's model.py); python_repo.py writes its repository
    server.py      `fusedops serve --server pytriton`: PyTriton's proxy to this process; options shared by both
    backends.py    what runs a batch: TensorRT engine, ORT CUDA EP / CPU with libfusedops_ort.so, PyTorch
    repository.py  `fusedops repo`: a model repository for an existing tritonserver (onnxruntime / tensorrt_plan)
    loadtest.py    `fusedops loadtest`: a bounded async KServe v2 client, every response checked
    report.py      the load report's JSON and PNG
    process.py     a server in a subprocess on free loopback ports (tests, the GPU sweep)
    sweep.py       the GPU sweep of the issue's targets (tools/gpu/device_serve.sh)

Nothing here is imported by ``import fusedops``; PyTriton and tritonclient come with the ``serve`` extra.
"""
