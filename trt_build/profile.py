"""The optimisation profile of an engine: ONNX inputs, trtexec-style shape arguments, min / opt / max batch.
Plain Python (no TensorRT), tested anywhere."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from fusedops.errors import FusedopsError

Shape = tuple[int, ...]
DEFAULT_MAX_BATCH = 1024  # the reference models' benchmark batch



@dataclass(frozen=True)
class InputInfo:
    name: str
    dims: tuple[int | str | None, ...]  # int: static; str: symbolic (dim_param); None: unknown
    elem_type: str  # ONNX type name, lower case: "float", "float16", "bfloat16", "undefined"


def onnx_inputs(model) -> list[InputInfo]:
    """The graph's real inputs (initializers listed as inputs are weights, not inputs)."""
    import onnx  # lazy: onnx; trt_build stays light for serve.backends, which the CLI parser imports

    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(str(model), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
        out.append(InputInfo(vi.name, tuple(dims), onnx.TensorProto.DataType.Name(tt.elem_type).lower()))
    return out


def parse_shapes_arg(text: str | None) -> dict[str, Shape]:
    """trtexec-style ``name:1x3x224x224,other:8x16`` → {name: (1, 3, 224, 224), ...}."""
    out: dict[str, Shape] = {}
    if not text:
        return out
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise FusedopsError(f"bad shape {item!r}: expected NAME:D0xD1x...")
        try:
            shape = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            raise FusedopsError(f"bad shape {item!r}: dimensions must be integers") from None
        if any(d <= 0 for d in shape):
            raise FusedopsError(f"bad shape {item!r}: dimensions must be positive")
        out[name.strip("'\"")] = shape
    return out


def derive_profile(inputs: Sequence[InputInfo], min_batch: int = 1, opt_batch: int | None = None,
                   max_batch: int | None = None,
                   shapes: Mapping[str, tuple[Shape, Shape, Shape]] | None = None) -> dict[str, tuple[Shape, Shape, Shape]]:
    """One optimisation profile: {input name: (min, opt, max)}.

    Dim 0 dynamic (symbolic or unknown) ranges over [min_batch, max_batch] with opt at opt_batch (default max_batch);
    static dims are kept. A dynamic dim other than 0 needs explicit shapes for that input (``shapes``), else an error
    names the input and the dim. A static dim 0 fixes the batch of that input."""
    shapes = dict(shapes or {})
    min_b, opt_b, max_b = check_batches(min_batch, opt_batch, max_batch)
    profile: dict[str, tuple[Shape, Shape, Shape]] = {}
    for inp in inputs:
        if inp.name in shapes:
            mn, op, mx = (tuple(int(d) for d in s) for s in shapes.pop(inp.name))
            if not (len(mn) == len(op) == len(mx) == len(inp.dims)):
                raise FusedopsError(f"input {inp.name!r} has rank {len(inp.dims)}; the given shapes have ranks "
                                    f"{len(mn)}/{len(op)}/{len(mx)}")
            for k, d in enumerate(inp.dims):
                if isinstance(d, int) and not (mn[k] == op[k] == mx[k] == d):
                    raise FusedopsError(f"input {inp.name!r} dim {k} is static ({d}) but the given shapes use "
                                        f"{mn[k]}/{op[k]}/{mx[k]}")
                if not (0 < mn[k] <= op[k] <= mx[k]):
                    raise FusedopsError(f"input {inp.name!r} dim {k}: need 0 < min <= opt <= max, got "
                                        f"{mn[k]}/{op[k]}/{mx[k]}")
            profile[inp.name] = (mn, op, mx)
            continue
        if not inp.dims:
            profile[inp.name] = ((), (), ())
            continue
        mn, op, mx = [], [], []
        for k, d in enumerate(inp.dims):
            if isinstance(d, int):
                mn.append(d), op.append(d), mx.append(d)
            elif k == 0:
                mn.append(min_b), op.append(opt_b), mx.append(max_b)
            else:
                raise FusedopsError(f"input {inp.name!r} has a dynamic dimension {k} ({d or '?'}) besides the batch; "
                                    f"give its shapes with --min-shapes/--opt-shapes/--max-shapes "
                                    f"(e.g. {inp.name}:1x...)")
        profile[inp.name] = (tuple(mn), tuple(op), tuple(mx))
    if shapes:
        raise FusedopsError(f"shapes given for unknown input(s) {', '.join(sorted(shapes))}; the model's inputs are "
                            f"{', '.join(i.name for i in inputs)}")
    return profile


def check_batches(min_batch: int, opt_batch: int | None, max_batch: int | None) -> tuple[int, int, int]:
    for name, v in (("min_batch", min_batch), ("opt_batch", opt_batch), ("max_batch", max_batch)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise FusedopsError(f"{name} must be a positive integer, got {v!r}")
    max_b = max_batch if max_batch is not None else max(DEFAULT_MAX_BATCH, min_batch, opt_batch or 0)
    opt_b = opt_batch if opt_batch is not None else max_b
    if not (min_batch <= opt_b <= max_b):
        raise FusedopsError(f"need min_batch <= opt_batch <= max_batch, got {min_batch} / {opt_b} / {max_b}")
    return min_batch, opt_b, max_b


def shapes_from_args(min_shapes: str | None, opt_shapes: str | None,
                     max_shapes: str | None) -> dict[str, tuple[Shape, Shape, Shape]] | None:
    mins, opts, maxs = parse_shapes_arg(min_shapes), parse_shapes_arg(opt_shapes), parse_shapes_arg(max_shapes)
    if not (mins or opts or maxs):
        return None
    names = set(mins) | set(opts) | set(maxs)
    out = {}
    for n in sorted(names):
        mn = mins.get(n) or opts.get(n) or maxs.get(n)
        mx = maxs.get(n) or opts.get(n) or mins.get(n)
        op = opts.get(n) or mx
        out[n] = (mn, op, mx)
    return out
