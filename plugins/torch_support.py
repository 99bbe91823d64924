"""What the Python parts of every PyTorch op share: the float32 precision rule, the fake kernels' shape check, and
the autograd helpers that differentiate the catalog's reference math. Imports nothing of the ops' own modules, so
``torch_ops`` and ``torch_convt`` both build on it without importing each other."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from fusedops.errors import FusedopsError

from . import abi


def resolve_allow_tf32(allow_tf32: int) -> int:
    """-1 → follow torch.get_float32_matmul_precision() ("highest" = strict FP32); 0/1 pass through."""
    if allow_tf32 not in (-1, 0, 1):
        raise FusedopsError(f"allow_tf32 must be -1 (follow torch), 0 or 1, got {allow_tf32}")
    if allow_tf32 == -1:
        return 0 if torch.get_float32_matmul_precision() == "highest" else 1
    return allow_tf32


def static_dims(dims) -> list[int | None]:
    """Sizes a fake kernel knows (symbolic ones become None: unknown to the library's shape rules)."""
    return [int(s) if isinstance(s, int) else None for s in dims]


def check_shapes(parsed_attributes, tensors: Sequence[Tensor | None]) -> None:
    """A fake kernel's check: the library's shape rules (``abi.describe``) on what is known of ``tensors`` (None: an
    absent optional input), raising FusedopsError with the rule's message, without the C function's name."""
    descs = [abi.tensor_desc(t.dtype if t.dtype in abi.DTYPE_CODES else None, static_dims(t.shape))
             if t is not None else abi.tensor_desc(None, None) for t in tensors]
    try:
        abi.describe(parsed_attributes, descs)
    except FusedopsError as e:
        raise FusedopsError(str(e).split(": ", 1)[-1]) from None


def grads_for(ctx, tensor_grads: tuple) -> tuple:
    """Pad with None for the attribute arguments. The count comes from ctx.needs_input_grad: PyTorch hands the op's
    autograd.Function the arguments as called (trailing defaults dropped) and expects one entry for each."""
    n = len(ctx.needs_input_grad)
    return tensor_grads + (None,) * (n - len(tensor_grads))


def reference_grads(fn, tensors: Sequence[Tensor], grad: Tensor) -> tuple:
    """Gradients of ``fn(*tensors)`` (the reference math) for ``grad``; under create_graph the recomputation stays
    connected to the inputs, so a double backward differentiates it again."""
    if torch.is_grad_enabled():
        wanted = [i for i, t in enumerate(tensors) if t.requires_grad]
        y = fn(*tensors)
        got = torch.autograd.grad(y, [tensors[i] for i in wanted], grad, create_graph=True, allow_unused=True)
        out: list = [None] * len(tensors)
        for i, g in zip(wanted, got):
            out[i] = g
        return tuple(out)
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(t.requires_grad or t.is_floating_point()) for t in tensors]
        y = fn(*leaves)
        return torch.autograd.grad(y, leaves, grad, allow_unused=True)
