"""torch → standard ONNX with torch's dynamo exporter (opset 20, IR 10 with torch 2.13), batch dimension dynamic."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import onnx
import torch

BATCH_DIM = "batch"
# Graph input / output names of every exported model: what a serving client sends and reads (Triton's config.pbtxt
# and KServe requests name tensors), so they are stable words rather than the exporter's node-derived names such as
# "add_9" or "group_norm".
INPUT_NAME = "input"
OUTPUT_NAME = "output"


@contextlib.contextmanager
def _quiet():
    """torch's exporter prints progress and warns about optional packages; none of it concerns our users."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "torch.fx",
                                               "torch._export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def export_module(module: torch.nn.Module, example: torch.Tensor, dynamic_batch: bool = True) -> onnx.ModelProto:
    """Export a one-input, one-output module; with ``dynamic_batch`` the input's dim 0 is the symbolic dim "batch".
    The graph's input is named ``input`` and its output ``output``."""
    dynamic_shapes = ({0: torch.export.Dim(BATCH_DIM)},) if dynamic_batch else None
    if dynamic_batch and example.shape[0] == 1:
        # torch.export specializes a size-1 dim to the constant 1; trace with two rows instead
        example = torch.cat([example, example])
    with _quiet(), torch.no_grad():
        program = torch.onnx.export(module.eval(), (example,), dynamo=True, dynamic_shapes=dynamic_shapes,
                                    verbose=False, optimize=True, input_names=[INPUT_NAME],
                                    output_names=[OUTPUT_NAME])
    return program.model_proto


def export_model(entry, size: str = "small", dynamic_batch: bool = True) -> onnx.ModelProto:
    """Export a reference model (a ``models.registry.ModelEntry``) at ``size`` ("small" or "bench")."""
    model = entry.build(size)
    (x,) = entry.inputs(size)
    return export_module(model, x, dynamic_batch=dynamic_batch)
