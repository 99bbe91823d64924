"""Real architectures with random weights at small sizes: diffusers' UNet2DModel and AutoencoderKL (the library
itself, a test dependency), a timm-style ResNet with GroupNorm (written here: timm requires torchvision, which does
not install next to the CPU torch this project pins; the block follows timm's ``resnet.Bottleneck`` with
``norm_layer=GroupNorm``), and a per-token MLP. Each is exported in float32, float16 and bfloat16; every GroupNorm
must be fused. Outputs are compared with eager PyTorch on ONNX Runtime's CPU EP where it has the kernels (float32
and float16; its CPU EP has no bfloat16 Conv), on the function bodies and with the fusedops library.

Tolerances: float32 1e-4 abs (deep stacks of float32 convs, two evaluation orders); float16: the fused model vs
eager float16 within max(4 x eager's own error vs float64, 1e-2), measured 2026-11-23 (eager fp16 errors here are
up to ~4e-3).
"""

from __future__ import annotations

import zlib

import numpy as np
import onnxruntime as ort
import pytest
import torch

from fusedops import ort as fo
from fusedops.exporter import fuse_model_with_report
from fusedops.exporter.export import export_module

diffusers = pytest.importorskip("diffusers", reason="diffusers is in the test extra (pip install -e '.[test]')")

LIB_REASON = fo.unavailable_reason()


class _Sample(torch.nn.Module):
    def __init__(self, model, timestep=None):
        super().__init__()
        self.model, self.timestep = model, timestep

    def forward(self, x):
        out = self.model(x, self.timestep) if self.timestep is not None else self.model(x)
        return out.sample


def unet():
    # one attention down / up block: ResNet blocks with the time embedding, attention, mid block (15 GroupNorms);
    # more blocks only repeat these and cost export time
    m = diffusers.UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                              block_out_channels=(16,), norm_num_groups=8, down_block_types=("AttnDownBlock2D",),
                              up_block_types=("AttnUpBlock2D",), attention_head_dim=8)
    return _Sample(m, 10), (2, 3, 8, 8)


def vae():
    m = diffusers.AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(16,), layers_per_block=1,
                                norm_num_groups=8, latent_channels=4, down_block_types=("DownEncoderBlock2D",),
                                up_block_types=("UpDecoderBlock2D",))
    return _Sample(m), (2, 3, 8, 8)


class Bottleneck(torch.nn.Module):
    """timm resnet.Bottleneck (conv1x1-norm-act, conv3x3-norm-act, conv1x1-norm, + shortcut, act) with GroupNorm."""

    def __init__(self, cin, width, groups=8):
        super().__init__()
        out = width * 4
        self.conv1, self.bn1 = torch.nn.Conv2d(cin, width, 1, bias=False), torch.nn.GroupNorm(groups, width)
        self.conv2, self.bn2 = torch.nn.Conv2d(width, width, 3, padding=1, bias=False), torch.nn.GroupNorm(groups,
                                                                                                          width)
        self.conv3, self.bn3 = torch.nn.Conv2d(width, out, 1, bias=False), torch.nn.GroupNorm(groups, out)
        self.down = torch.nn.Sequential(torch.nn.Conv2d(cin, out, 1, bias=False), torch.nn.GroupNorm(groups, out))
        self.act = torch.nn.ReLU()

    def forward(self, x):
        y = self.act(self.bn1(self.conv1(x)))
        y = self.act(self.bn2(self.conv2(y)))
        return self.act(self.bn3(self.conv3(y)) + self.down(x))


def resnet_gn():
    stem = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1, bias=False), torch.nn.GroupNorm(8, 16),
                               torch.nn.ReLU())
    return torch.nn.Sequential(stem, Bottleneck(16, 8), Bottleneck(32, 8)), (2, 3, 8, 8)


class TokenMlp(torch.nn.Module):
    def __init__(self, d=32, hidden=64, groups=8):
        super().__init__()
        self.fc1, self.gn, self.fc2 = torch.nn.Linear(d, hidden), torch.nn.GroupNorm(groups, hidden), \
            torch.nn.Linear(hidden, d)

    def forward(self, x):
        h = self.fc1(x)
        h = torch.nn.functional.gelu(self.gn(h.reshape(-1, h.shape[-1])).reshape(h.shape))
        return x + self.fc2(h)


def token_mlp():
    return TokenMlp(), (2, 6, 32)


MODELS = {"diffusers_unet": unet, "diffusers_vae": vae, "resnet_gn": resnet_gn, "token_mlp": token_mlp}
MIN_GROUP_NORMS = {"diffusers_unet": 15, "diffusers_vae": 18, "resnet_gn": 9, "token_mlp": 1}
EXPECTED_OPS = {"diffusers_unet": {"GroupNormAct"}, "diffusers_vae": {"GroupNormAct"},
                "resnet_gn": {"GroupNormAct"}, "token_mlp": {"GemmGroupNormAct"}}


def _run(model, x: np.ndarray, library: bool) -> np.ndarray:
    if library:
        sess = fo.session(model, providers=["CPUExecutionProvider"])
    else:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: x})[0].astype(np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_every_group_norm_of_a_real_architecture_is_fused(name, dtype):
    dt = getattr(torch, dtype)
    torch.manual_seed(zlib.crc32(f"{name}/{dtype}".encode()))
    module, shape = MODELS[name]()
    module = module.eval()
    for p in module.parameters():  # random, non-trivial weights (diffusers zero-inits some output convs)
        torch.nn.init.normal_(p, 0.0, 0.2) if p.dim() > 1 else torch.nn.init.normal_(p, 0.5, 0.3)
    x = torch.randn(*shape)
    with torch.no_grad():
        ref = module.double()(x.double()).numpy()
        module = module.to(dt)
        eager = module(x.to(dt)).double().numpy()
        onnx_model = export_module(module, x.to(dt))
    fused, report = fuse_model_with_report(onnx_model)
    assert not report.unfused, [(e.site, e.reason) for e in report.unfused]
    assert len(report.group_norms) >= MIN_GROUP_NORMS[name]
    assert {e.op for e in report.group_norms} == EXPECTED_OPS[name]
    assert {e.dtype for e in report.group_norms} == {dtype.upper() if dtype != "float32" else "FLOAT"}
    assert not any(n.op_type in ("InstanceNormalization", "GroupNormalization") for n in fused.graph.node)
    if dt == torch.bfloat16:
        return  # ORT's CPU EP has no bfloat16 Conv / MatMul to run the rest of these graphs
    eager_err = float(np.abs(eager - ref).max())
    tol = 1e-4 if dt == torch.float32 else max(4 * eager_err, 1e-2)
    for library in (False, True):
        if library and LIB_REASON:
            continue
        y = _run(fused, x.to(dt).numpy(), library)
        assert y.shape == eager.shape and np.isfinite(y).all()
        assert float(np.abs(y - eager).max()) <= tol, (library, float(np.abs(y - eager).max()), eager_err)
