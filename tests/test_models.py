"""Each reference model equals a hand-written functional re-statement of the spec (in float64)."""

import math

import pytest
import torch

from fusedops.models import REGISTRY, get_entry


def group_norm_per_sample(x, num_groups, gamma, beta, eps=1e-5):
    """GroupNorm written out: statistics per sample n and group g, never across the batch; biased variance."""
    n, c = x.shape[:2]
    g = x.reshape(n, num_groups, -1)
    mean = g.mean(dim=-1, keepdim=True)
    var = ((g - mean) ** 2).mean(dim=-1, keepdim=True)
    y = ((g - mean) / torch.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.dim() - 2)
    return y * gamma.reshape(shape) + beta.reshape(shape)


def mish(x):
    softplus = torch.where(x > 20, x, torch.log1p(torch.exp(x)))  # PyTorch's softplus, threshold 20
    return x * torch.tanh(softplus)


def gelu_exact(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0)))


def spec_model1(m, x):
    z = x @ m.fc.weight.T + m.fc.bias
    z = group_norm_per_sample(z, m.gn.num_groups, m.gn.weight, m.gn.bias, m.gn.eps)
    z = torch.where(z >= 0, z, 0.01 * z)
    return z + z


def spec_model2(m, x):
    z = x @ m.gemm.weight.T + m.gemm.bias
    z = group_norm_per_sample(z, m.group_norm.num_groups, m.group_norm.weight, m.group_norm.bias)
    mins = z.min(dim=1).values  # (B,)
    b, c = x.shape[0], m.bias.shape[1]
    out = torch.empty(1, c, b, 1, dtype=x.dtype)
    for ci in range(c):  # out[0, c, b, 0] = min_j gn(gemm(x))[b, j] + bias[0, c, 0, 0]
        out[0, ci, :, 0] = mins + m.bias[0, ci, 0, 0]
    return out


def spec_model3(m, x):
    z = x @ m.gemm.weight.T + m.gemm.bias
    z = z + m.bias
    z = torch.clamp(z, -1.0, 1.0)  # Hardtanh default range [-1, 1]
    z = mish(z)
    return group_norm_per_sample(z, m.groupnorm.num_groups, m.groupnorm.weight, m.groupnorm.bias)


def spec_model4(m, x):
    z = torch.nn.functional.conv_transpose2d(x, m.conv_transpose.weight, m.conv_transpose.bias,
                                             stride=m.conv_transpose.stride)
    z = gelu_exact(z)
    return group_norm_per_sample(z, m.group_norm.num_groups, m.group_norm.weight, m.group_norm.bias)


SPECS = {1: spec_model1, 2: spec_model2, 3: spec_model3, 4: spec_model4}


@pytest.mark.parametrize("key", list(REGISTRY))
def test_forward_matches_spec(key):
    entry = get_entry(key)
    model = entry.build("small").double()
    gen = torch.Generator().manual_seed(1234)
    (x,) = entry.inputs("small", generator=gen, dtype=torch.float64)
    with torch.no_grad():
        got = model(x)
        want = SPECS[entry.number](model, x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_model2_output_is_1_C_B_1():
    entry = get_entry("gemm_groupnorm_min_biasadd")
    model = entry.build("small")
    (x,) = entry.inputs("small", batch=5)
    assert model(x).shape == (1, entry.small.init_inputs[1], 5, 1)


def test_group_norm_is_per_sample():
    """Changing one sample must not change another sample's output (no statistics across the batch)."""
    entry = get_entry("3")
    model = entry.build("small")
    (x,) = entry.inputs("small", batch=4)
    y = model(x)
    x2 = x.clone()
    x2[0] = x2[0] * 100 + 7
    y2 = model(x2)
    torch.testing.assert_close(y[1:], y2[1:], rtol=0, atol=0)
    assert not torch.allclose(y[0], y2[0])


@pytest.mark.parametrize("key", list(REGISTRY))
def test_registry_and_module_interface(key):
    entry = get_entry(key)
    mod = entry.module
    assert list(mod.get_init_inputs()) == list(entry.bench.init_inputs)
    # get_inputs is the spec's uniform [0, 1) input at benchmark size; check shape without allocating model 4's 2 GB
    assert tuple(entry.bench.input_shape) == tuple(
        int(v) for v in ([mod.batch_size] + ([mod.in_channels, mod.height, mod.width] if entry.number == 4
                                            else [mod.get_init_inputs()[0]])))
    assert entry.build("small").__class__.__name__ == "Model"


def test_unknown_model_name_lists_choices():
    with pytest.raises(ValueError, match="unknown model 'nope'.*choose one of"):
        get_entry("nope")
