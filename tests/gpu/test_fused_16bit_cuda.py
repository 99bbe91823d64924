"""Fuser output in float16 / bfloat16 and token-GEMM form on ONNX Runtime's CUDA EP with the fusedops library (the
CPU suite runs the same models on the CPU EP: tests/test_fuse_16bit_tokens.py, tests/test_real_models.py).

Each fused model runs on the CUDA EP with the library and is compared with the same fused model on the CPU EP with
the library (the CPU kernels are tested against float64 there) and with eager PyTorch on the GPU in the same dtype.
bfloat16 models get float32 Casts at their input and output (onnxruntime's Python API has no bfloat16 arrays).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu
ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the CPU tests' model definitions

from test_fuse_16bit_tokens import GnSiluConv, TokenMlp, UpcastGn, _float_io  # noqa: E402

from fusedops.exporter import fuse_model_with_report  # noqa: E402
from fusedops.exporter.export import export_module  # noqa: E402

# float16: 1 ulp at |y| ~ 4 plus the difference of two float32 evaluations; bfloat16 the same at its spacing
TOL = {torch.float16: 4e-3, torch.bfloat16: 3e-2}


@pytest.fixture(scope="module")
def fo():
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch")
    from fusedops import ort as fo_mod
    from fusedops.errors import FusedopsError

    try:
        fo_mod.library_path()
    except FusedopsError:
        pytest.skip("libfusedops_ort.so is not built (fusedops build-native --cuda on)")
    if not fo_mod.library_has_cuda():
        pytest.skip("libfusedops_ort.so was built without CUDA (rebuild with FUSEDOPS_CUDA=ON)")
    return fo_mod


CASES = {
    "resnet_norm": (lambda: GnSiluConv(conv=False), (4, 16, 24, 20)),
    "upcast_norm": (UpcastGn, (4, 16, 12, 12)),
    "token_mlp": (lambda: TokenMlp(k=64, c=128, g=8), (4, 33, 64)),
    "token_mlp_merged": (lambda: TokenMlp(k=64, c=128, g=8, merged=True), (4, 33, 64)),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", list(CASES))
def test_fused_16bit_and_token_models_on_the_cuda_ep(fo, case, dtype):
    make, shape = CASES[case]
    torch.manual_seed(7)
    module = make().eval()
    module = module.float() if isinstance(module, UpcastGn) else module.to(dtype)
    x = torch.randn(*shape).to(dtype)
    with torch.no_grad():
        eager = module.cuda()(x.cuda()).float().cpu().numpy()
        onnx_model = export_module(module.cpu(), x)
    fused, report = fuse_model_with_report(onnx_model)
    assert report.group_norms and not report.unfused
    feed_model = _float_io(fused) if dtype == torch.bfloat16 else fused
    feed = x.float().numpy() if dtype == torch.bfloat16 else x.numpy()
    before = fo.kernel_calls("cuda")
    y_cuda = fo.run(fo.session(feed_model, providers=["CUDAExecutionProvider"]),
                    {feed_model.graph.input[0].name: feed})[0].astype(np.float32)
    assert fo.kernel_calls("cuda") > before  # our CUDA kernels ran, not the function bodies
    y_cpu = fo.run(fo.session(feed_model, providers=["CPUExecutionProvider"]),
                   {feed_model.graph.input[0].name: feed})[0].astype(np.float32)
    np.testing.assert_allclose(y_cuda, y_cpu, rtol=0, atol=TOL[dtype])
    np.testing.assert_allclose(y_cuda, eager, rtol=0, atol=2 * TOL[dtype])
