"""Registry of the reference models: benchmark sizes (the spec's) and small test sizes with the same structure."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import torch

from fusedops.errors import UsageError


@dataclass(frozen=True)
class Sizes:
    init_inputs: tuple  # constructor arguments, in order
    input_shape: tuple  # the one input's shape


@dataclass(frozen=True)
class ModelEntry:
    key: str  # short CLI name
    number: int
    module_name: str  # module under fusedops.models
    bench: Sizes
    small: Sizes

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(f"{__package__}.{self.module_name}")

    @property
    def title(self) -> str:
        return f"{self.number} {self.module_name}"

    def sizes(self, size: str = "small") -> Sizes:
        if size not in ("small", "bench"):
            raise ValueError(f"size must be 'small' or 'bench', got {size!r}")
        return self.small if size == "small" else self.bench

    def build(self, size: str = "small", cls_name: str = "Model", seed: int | None = 0) -> torch.nn.Module:
        """Construct the model (seeded, so Model and ModelNew get identical weights)."""
        cls: Callable = getattr(self.module, cls_name)
        if seed is not None:
            torch.manual_seed(seed)
        return cls(*self.sizes(size).init_inputs).eval()

    def inputs(self, size: str = "small", batch: int | None = None, generator: torch.Generator | None = None,
               device="cpu", dtype=torch.float32) -> list[torch.Tensor]:
        """Fresh uniform [0, 1) inputs, as the model's get_inputs (optionally at another batch size)."""
        shape = list(self.sizes(size).input_shape)
        if batch is not None:
            shape[0] = batch
        return [torch.rand(*shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)]


REGISTRY: dict[str, ModelEntry] = {
    e.key: e
    for e in [
        ModelEntry("matmul_groupnorm_leakyrelu_sum", 1, "matmul_groupnorm_leakyrelu_sum",
                   bench=Sizes((8192, 8192, 512), (1024, 8192)),
                   small=Sizes((96, 160, 10), (12, 96))),
        ModelEntry("gemm_groupnorm_min_biasadd", 2, "gemm_groupnorm_min_biasadd",
                   bench=Sizes((8192, 8192, 512, (1, 8192, 1, 1)), (1024, 8192)),
                   small=Sizes((96, 160, 10, (1, 160, 1, 1)), (12, 96))),
        ModelEntry("gemm_biasadd_hardtanh_mish_groupnorm", 3, "gemm_biasadd_hardtanh_mish_groupnorm",
                   bench=Sizes((8192, 8192, (8192,), 256), (1024, 8192)),
                   small=Sizes((96, 160, (160,), 5), (12, 96))),
        ModelEntry("convtranspose2d_gelu_groupnorm", 4, "convtranspose2d_gelu_groupnorm",
                   bench=Sizes((64, 64, 3, 1, 8, 8), (128, 64, 256, 256)),
                   small=Sizes((6, 12, 3, 1, 8, 4), (3, 6, 14, 18))),
    ]
}


def model_names() -> list[str]:
    return list(REGISTRY)


def get_entry(name: str) -> ModelEntry:
    """Look a model up by key, number ("1".."4") or module name; UsageError (a ValueError) names the choices."""
    key = str(name).strip()
    for e in REGISTRY.values():
        if key in (e.key, str(e.number), e.module_name, f"model{e.number}"):
            return e
    raise UsageError(f"unknown model {name!r}; choose one of: "
                     + ", ".join(f"{e.key} ({e.number})" for e in REGISTRY.values()))
