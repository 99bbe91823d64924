"""Model 2: Linear → GroupNorm → min over channels (keepdim) → + bias of shape (1, C, 1, 1).

Broadcasting (B, 1) with (1, C, 1, 1) yields (1, C, B, 1); that is the reference behaviour and is kept.
"""

import torch
import torch.nn as nn

from fusedops.plugins import torch_ops

batch_size = 1024
in_features = 8192
out_features = 8192
num_groups = 512
bias_shape = (1, out_features, 1, 1)


class Model(nn.Module):
    def __init__(self, in_features, out_features, num_groups, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.gemm(x)
        x = self.group_norm(x)
        x = torch.min(x, dim=1, keepdim=True)[0]
        x = x + self.bias
        return x


class ModelNew(nn.Module):
    """Model with gemm → group_norm → min over channels fused into one op (reduce="min"), then ``+ self.bias``.

    The broadcast add keeps the reference's (1, C, B, 1) output; the fused op writes only the (B, 1) minima.
    """

    def __init__(self, in_features, out_features, num_groups, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        # Read from the modules' dicts: nn.Module.__getattr__ costs ~1 us a lookup, a third of this call's host time.
        gemm, gn = self._modules["gemm"]._parameters, self._modules["group_norm"]
        x = torch_ops.gemm_group_norm_act(x, gemm["weight"], gemm["bias"], gn._parameters["weight"],
                                          gn._parameters["bias"], [], gn.num_groups, gn.eps, "", "", "min")
        return x + self._parameters["bias"]


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups, bias_shape]
