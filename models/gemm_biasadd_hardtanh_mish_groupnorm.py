"""Model 3: Linear → + bias → Hardtanh [-1, 1] → Mish → GroupNorm."""

import torch
import torch.nn as nn

from fusedops.plugins import torch_ops

batch_size = 1024
in_features = 8192
out_features = 8192
bias_shape = (out_features,)
num_groups = 256


class Model(nn.Module):
    def __init__(self, in_features, out_features, bias_shape, num_groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.hardtanh = nn.Hardtanh()
        self.mish = nn.Mish()
        self.groupnorm = nn.GroupNorm(num_groups=num_groups, num_channels=out_features)

    def forward(self, x):
        x = self.gemm(x)
        x = x + self.bias
        x = self.hardtanh(x)
        x = self.mish(x)
        x = self.groupnorm(x)
        return x


class ModelNew(nn.Module):
    """Model in one fused op: GEMM, then pre-chain ``add(@0);hardtanh(lo,hi);mish`` (@0 = self.bias), GroupNorm."""

    def __init__(self, in_features, out_features, bias_shape, num_groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.hardtanh = nn.Hardtanh()
        self.mish = nn.Mish()
        self.groupnorm = nn.GroupNorm(num_groups=num_groups, num_channels=out_features)
        self.refresh_chains()

    def refresh_chains(self) -> None:
        """Build the chain text from the submodules' constants: once here, not in forward (formatting floats on
        every call broke torch.compile(fullgraph=True) once a second instance made them symbolic floats). Call
        again after changing ``hardtanh.min_val`` / ``max_val``."""
        lo, hi = torch_ops.chain_number(self.hardtanh.min_val), torch_ops.chain_number(self.hardtanh.max_val)
        self.pre_chain = f"add(@0);hardtanh({lo},{hi});mish"

    def forward(self, x):
        # Read from the modules' dicts: nn.Module.__getattr__ costs ~1 us a lookup, a third of this call's host time.
        gemm, gn = self._modules["gemm"]._parameters, self._modules["groupnorm"]
        return torch_ops.gemm_group_norm_act(x, gemm["weight"], gemm["bias"], gn._parameters["weight"],
                                             gn._parameters["bias"], [self._parameters["bias"]], gn.num_groups,
                                             gn.eps, self.pre_chain, "", "")


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape, num_groups]
