"""What the GPU model and op tests share (test_models_gpu.py, test_fused_ops_gpu.py): the model keys, tolerances
(explained in test_models_gpu.py's docstring), the module fixture that skips without the CUDA kernels and poisons
every output the ops allocate, strict FP32 / TF32 switching, seeded generators."""

from __future__ import annotations

import os

import pytest
import torch

from fusedops.models import REGISTRY
from fusedops.plugins import torch_ops

KEYS = list(REGISTRY)
_REF64: dict[str, tuple] = {}  # key → (Model, ModelNew, input, float64 output) at bench size, one model at a time
TOL = {"fp32": (1e-4, 1e-4), "tf32": (1e-2, 1e-2)}
TOL_16 = {torch.bfloat16: 5e-2, torch.float16: 1e-2}


@pytest.fixture(autouse=True, scope="module")
def _need_cuda_kernels():
    ok, why = torch_ops.cuda_kernels_available()
    if not ok:
        pytest.skip(f"needs a CUDA device and the fusedops CUDA library: {why}")
    old = os.environ.get("FUSEDOPS_POISON_OUTPUTS")
    os.environ["FUSEDOPS_POISON_OUTPUTS"] = "1"  # the ABI binding's own allocations (tests calling plugins.abi)
    torch_ops.set_poison_outputs(True)           # the C++ ops' allocations
    yield
    torch_ops.set_poison_outputs(False)
    if old is None:
        os.environ.pop("FUSEDOPS_POISON_OUTPUTS")
    else:
        os.environ["FUSEDOPS_POISON_OUTPUTS"] = old
    _REF64.clear()
    torch.cuda.empty_cache()


class precision:
    """fp32: strict FP32 GEMMs and convolutions; tf32: TF32 for both."""

    def __init__(self, p):
        self.p = p

    def __enter__(self):
        self.old = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
        torch.set_float32_matmul_precision("highest" if self.p == "fp32" else "high")
        torch.backends.cudnn.allow_tf32 = self.p != "fp32"

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.old[0])
        torch.backends.cudnn.allow_tf32 = self.old[1]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _max_err(a, b):
    return (a.double() - b.double()).abs().max().item()

def _params(C, n_extras, seed, device="cuda"):
    g = _gen(seed)
    t = [torch.randn(C, generator=g) for _ in range(2 + n_extras)]
    t[0] = t[0] + 1.0
    return [v.to(device) for v in t]
