"""Model 1: Linear → GroupNorm → LeakyReLU → x + x."""

import torch
import torch.nn as nn

from fusedops.plugins import torch_ops

batch_size = 1024
input_size = 8192
hidden_size = 8192
num_groups = 512


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_groups, eps=1e-5, negative_slope=0.01):
        super().__init__()
        self.fc = nn.Linear(input_size, hidden_size)
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=hidden_size, eps=eps)
        self.leaky_relu = nn.LeakyReLU(negative_slope=negative_slope)

    def forward(self, x):
        x = self.fc(x)
        x = self.gn(x)
        x = self.leaky_relu(x)
        return x + x


class ModelNew(nn.Module):
    """Model with fc → gn → leaky_relu → x + x in one fused op (GEMM epilogue: GroupNorm, LeakyReLU, ×2).

    Same constructor, submodules, parameter names/shapes and creation order as Model, so seeded construction gives
    identical weights and state_dicts load both ways. ``x + x`` is ``mul(2)``: exactly equal in floating point.
    """

    def __init__(self, input_size, hidden_size, num_groups, eps=1e-5, negative_slope=0.01):
        super().__init__()
        self.fc = nn.Linear(input_size, hidden_size)
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=hidden_size, eps=eps)
        self.leaky_relu = nn.LeakyReLU(negative_slope=negative_slope)
        self.refresh_chains()

    def refresh_chains(self) -> None:
        """Build the chain text from the submodules' constants: once here, not in forward (formatting a float on
        every call broke torch.compile(fullgraph=True) once a second instance made the slope a symbolic float).
        Call again after changing ``leaky_relu.negative_slope``."""
        self.post_chain = f"leaky_relu({torch_ops.chain_number(self.leaky_relu.negative_slope)});mul(2)"

    def forward(self, x):
        # Read from the modules' dicts: nn.Module.__getattr__ costs ~1 us a lookup, a third of this call's host time.
        fc, gn = self._modules["fc"]._parameters, self._modules["gn"]
        return torch_ops.gemm_group_norm_act(x, fc["weight"], fc["bias"], gn._parameters["weight"],
                                             gn._parameters["bias"], [], gn.num_groups, gn.eps, "", self.post_chain, "")


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_groups]
