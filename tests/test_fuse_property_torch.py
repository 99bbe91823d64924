"""The fuser's property (supported chains fuse completely, results unchanged) on what torch's dynamo exporter
actually writes, one export per example (graph checks: fuse_graphs.py)."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from fusedops import catalog
from fusedops.exporter import fuse_model

from fuse_graphs import SETTINGS, _arbitrate, fused_node, run


# ---------------------------------------------------------------------------------------------------------------------
# The same property on what torch's dynamo exporter actually writes (slower: one export per example)
# ---------------------------------------------------------------------------------------------------------------------

def _torch_step(data, channels, rank):
    """A torch elementwise function and the catalog step names its export must fuse to."""
    kind = data.draw(st.sampled_from(["relu", "sigmoid", "tanh", "silu", "mish", "hardswish", "hardsigmoid", "gelu",
                                      "gelu_tanh", "softplus", "leaky_relu", "hardtanh", "clamp_min", "x+x", "add",
                                      "sub_channel", "rsub", "div", "mul_channel"]))
    shape = (channels,) + (1,) * (rank - 2)
    # (not 1.0: x / 1.0 is an identity the exporter removes, leaving no step to fuse)
    c = torch.tensor(data.draw(st.floats(0.5, 2.0).filter(lambda v: v != 1.0)))
    vec = torch.linspace(0.5, 1.5, channels).reshape(shape)
    table = {
        "relu": (torch.relu, ["relu"]), "sigmoid": (torch.sigmoid, ["sigmoid"]), "tanh": (torch.tanh, ["tanh"]),
        "silu": (torch.nn.functional.silu, ["silu"]), "mish": (torch.nn.functional.mish, ["mish"]),
        "hardswish": (torch.nn.functional.hardswish, ["hardswish"]),
        "hardsigmoid": (torch.nn.functional.hardsigmoid, ["hardsigmoid"]),
        "gelu": (torch.nn.functional.gelu, ["gelu"]),
        "gelu_tanh": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), ["gelu_tanh"]),
        "softplus": (lambda x: torch.nn.functional.softplus(x, beta=float(c), threshold=5.0), ["softplus"]),
        "leaky_relu": (lambda x: torch.nn.functional.leaky_relu(x, float(c) / 4), ["leaky_relu"]),
        "hardtanh": (lambda x: torch.nn.functional.hardtanh(x, -float(c), float(c)), ["hardtanh"]),
        "clamp_min": (lambda x: torch.clamp(x, min=-float(c)), ["hardtanh"]),
        "x+x": (lambda x: x + x, ["mul"]),
        "add": (lambda x: x + float(c), ["add"]),
        "sub_channel": (lambda x: x - vec, ["sub"]),
        "rsub": (lambda x: float(c) - x, ["rsub"]),
        "div": (lambda x: x / float(c), ["div"]),
        "mul_channel": (lambda x: vec * x, ["mul"]),
    }
    return table[kind]


class _ChainModel(torch.nn.Module):
    def __init__(self, pre, post, groups, channels):
        super().__init__()
        self.pre, self.post = pre, post
        self.gn = torch.nn.GroupNorm(groups, channels)
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        for f in self.pre:
            x = f(x)
        x = self.gn(x)
        for f in self.post:
            x = f(x)
        return x


def _merge_clips(names):
    """torch's exporter merges back-to-back clamps and relus into one Clip (or Relu): compare runs of them as one."""
    out = []
    for n in names:
        n = "clamp" if n in ("hardtanh", "relu") else n
        if not (n == "clamp" and out and out[-1] == "clamp"):
            out.append(n)
    return out


@settings(max_examples=10, **SETTINGS)
@given(st.data())
def test_torch_exported_chains_fuse_completely(data):
    from fusedops.exporter.export import export_module

    rank = data.draw(st.integers(2, 4))
    groups = data.draw(st.integers(1, 3))
    channels = groups * data.draw(st.integers(1, 2))
    pre = [_torch_step(data, channels, rank) for _ in range(data.draw(st.integers(0, 3)))]
    post = [_torch_step(data, channels, rank) for _ in range(data.draw(st.integers(0, 3)))]
    with torch.random.fork_rng():  # seeds the module's parameter init without touching other tests' global RNG
        torch.manual_seed(data.draw(st.integers(0, 1000)))
        module = _ChainModel([f for f, _ in pre], [f for f, _ in post], groups, channels).eval()
        x = torch.randn(3, channels, *[data.draw(st.integers(1, 4)) for _ in range(rank - 2)])
    unfused = export_module(module, x)
    fused = fuse_model(unfused)
    node = fused_node(fused)
    assert len(fused.graph.node) == 1, [n.op_type for n in fused.graph.node]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    for key, chain in (("pre", pre), ("post", post)):
        got_names = [s.name for s in catalog.parse_chain(attrs[key])]
        assert _merge_clips(got_names) == _merge_clips([n for _, names in chain for n in names]), key
    with torch.no_grad():
        eager = module(x).numpy()
    (got,) = run(fused, x.numpy())
    (want,) = run(unfused, x.numpy())
    for other, what in ((eager, "eager module"), (want, "unfused export")):
        if not np.allclose(got, other, rtol=1e-5, atol=1e-5):
            _arbitrate(got, other, fused, x.numpy(), what)
