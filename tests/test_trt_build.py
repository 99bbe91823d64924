"""trt_build's pure-Python parts (no TensorRT needed): arguments, profile derivation, precision flags, cache keys,
progress rendering, and the errors build_engine raises before it needs TensorRT."""

from __future__ import annotations

import argparse
import importlib.util
import io
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fusedops.errors import FusedopsError
from fusedops.trt_build import builder as B


def _model(tmp_path, inputs, name="m.onnx", fused=False):
    """A tiny ONNX model: Identity per input; inputs = [(name, dims, elem_type)]."""
    vis, outs, nodes = [], [], []
    for n, dims, et in inputs:
        vis.append(helper.make_tensor_value_info(n, et, dims))
        outs.append(helper.make_tensor_value_info(n + "_out", et, None))
        nodes.append(helper.make_node("Identity", [n], [n + "_out"]))
    if fused:
        nodes.append(helper.make_node("GroupNormAct", [inputs[0][0]], ["fused_out"], domain="fusedops", num_groups=1))
        outs.append(helper.make_tensor_value_info("fused_out", inputs[0][2], None))
    w = helper.make_tensor("weight", TensorProto.FLOAT, [2], [1.0, 2.0])
    g = helper.make_graph(nodes, "g", vis + [helper.make_tensor_value_info("weight", TensorProto.FLOAT, [2])], outs,
                          initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("fusedops", 1)])
    p = tmp_path / name
    onnx.save(m, str(p))
    return p


# ---- precision -------------------------------------------------------------------------------------------------------

def test_precision_flags_trt10():
    assert B.precision_plan("tf32", 10) == B.PrecisionPlan("tf32", ("TF32",), ())
    assert B.precision_plan("fp32", 10) == B.PrecisionPlan("fp32", (), ("TF32",))
    assert B.precision_plan("FP16", 10) == B.PrecisionPlan("fp16", ("FP16", "TF32"), ())
    assert B.precision_plan("bf16", 10) == B.PrecisionPlan("bf16", ("BF16", "TF32"), ())


def test_precision_flags_trt11_strongly_typed():
    p = B.precision_plan("fp16", 11)
    assert "FP16" not in p.set_flags and p.required_input_dtype == "float16"
    assert B.precision_plan("bf16", 11).required_input_dtype == "bfloat16"
    assert B.precision_plan("fp32", 11).clear_flags == ("TF32",)
    assert B.precision_plan("tf32", 11).required_input_dtype is None


def test_precision_flag_names_exist_in_the_headers():
    """The flag names used for TensorRT 11 exist in the TensorRT 11 BuilderFlag enum (headers, when present)."""
    from trt_harness.driver import tensorrt_include_dir

    inc = tensorrt_include_dir()
    if inc is None:
        pytest.skip("TensorRT headers not found; see scripts/get_tensorrt_headers.md")
    text = (inc / "NvInfer.h").read_text(errors="replace")
    enum = text[text.index("enum class BuilderFlag"):]
    enum = enum[:enum.index("};")]
    for prec in B.PRECISIONS:
        for flag in B.precision_plan(prec, 11).set_flags + B.precision_plan(prec, 11).clear_flags:
            assert f"k{flag} " in enum or f"k{flag}=" in enum, flag


def test_unknown_precision():
    with pytest.raises(FusedopsError, match="unknown precision 'int8'"):
        B.precision_plan("int8", 10)


# ---- profiles --------------------------------------------------------------------------------------------------------

def test_profile_dynamic_batch(tmp_path):
    p = _model(tmp_path, [("x", ["batch", 96], TensorProto.FLOAT)])
    inputs = B.onnx_inputs(p)
    assert [i.name for i in inputs] == ["x"]  # the initializer listed as a graph input is not an input
    assert inputs[0].elem_type == "float"
    prof = B.derive_profile(inputs, min_batch=2, opt_batch=8, max_batch=64)
    assert prof == {"x": ((2, 96), (8, 96), (64, 96))}
    # defaults: opt = max = DEFAULT_MAX_BATCH
    assert B.derive_profile(inputs)["x"] == ((1, 96), (B.DEFAULT_MAX_BATCH, 96), (B.DEFAULT_MAX_BATCH, 96))


def test_profile_static_input_kept(tmp_path):
    p = _model(tmp_path, [("x", [4, 3, 8, 8], TensorProto.FLOAT), ("y", [None, 5], TensorProto.FLOAT16)])
    prof = B.derive_profile(B.onnx_inputs(p), max_batch=16)
    assert prof["x"] == ((4, 3, 8, 8),) * 3
    assert prof["y"] == ((1, 5), (16, 5), (16, 5))


def test_profile_dynamic_non_batch_dim_needs_shapes(tmp_path):
    p = _model(tmp_path, [("image", ["n", 3, "h", "w"], TensorProto.FLOAT)])
    with pytest.raises(FusedopsError, match=r"input 'image' has a dynamic dimension 2 \(h\)"):
        B.derive_profile(B.onnx_inputs(p))
    shapes = B.shapes_from_args("image:1x3x32x32", "image:4x3x64x64", "image:8x3x128x128")
    prof = B.derive_profile(B.onnx_inputs(p), shapes=shapes)
    assert prof["image"] == ((1, 3, 32, 32), (4, 3, 64, 64), (8, 3, 128, 128))


def test_profile_shape_errors(tmp_path):
    p = _model(tmp_path, [("x", ["b", 6], TensorProto.FLOAT)])
    inputs = B.onnx_inputs(p)
    with pytest.raises(FusedopsError, match="dim 1 is static"):
        B.derive_profile(inputs, shapes={"x": ((1, 7), (2, 7), (4, 7))})
    with pytest.raises(FusedopsError, match="rank"):
        B.derive_profile(inputs, shapes={"x": ((1,), (2,), (4,))})
    with pytest.raises(FusedopsError, match="min <= opt <= max"):
        B.derive_profile(inputs, shapes={"x": ((4, 6), (2, 6), (8, 6))})
    with pytest.raises(FusedopsError, match="unknown input"):
        B.derive_profile(inputs, shapes={"nope": ((1, 6), (1, 6), (1, 6))})


@pytest.mark.parametrize("mn,opt,mx", [(0, None, None), (4, 2, 8), (1, None, -3), (True, None, None), (2.5, None, 4)])
def test_bad_batches(mn, opt, mx):
    with pytest.raises(FusedopsError):
        B.check_batches(mn, opt, mx)


def test_parse_shapes_arg():
    assert B.parse_shapes_arg("x:1x96,input.1:2x3") == {"x": (1, 96), "input.1": (2, 3)}
    for bad in ("x1x96", "x:1xa", "x:0x3", ":1x2"):
        with pytest.raises(FusedopsError):
            B.parse_shapes_arg(bad)
    assert B.shapes_from_args(None, None, None) is None
    # one given side fills the others (trtexec behaviour)
    assert B.shapes_from_args(None, None, "x:8x3") == {"x": ((8, 3), (8, 3), (8, 3))}


# ---- cache keys ------------------------------------------------------------------------------------------------------

def _parts(**kw):
    base = dict(onnx_hash="a" * 64, tensorrt_version="10.13.0", gpu_name="NVIDIA H200", compute_capability="9.0",
                flags={"precision": "tf32", "profile": {"x": [[1, 96], [8, 96], [64, 96]]}, "workspace_mb": 4096},
                plugin_hash="b" * 64)
    base.update(kw)
    return B.CacheKeyParts(**base)


def test_cache_key_changes_with_every_part():
    k0 = B.engine_cache_key(_parts())
    assert k0 == B.engine_cache_key(_parts())  # stable
    assert len(k0) == 32
    variants = [dict(onnx_hash="c" * 64), dict(tensorrt_version="10.13.1"), dict(gpu_name="NVIDIA H100"),
                dict(compute_capability="8.9"), dict(plugin_hash="d" * 64),
                dict(flags={"precision": "fp32", "profile": {"x": [[1, 96], [8, 96], [64, 96]]}, "workspace_mb": 4096}),
                dict(flags={"precision": "tf32", "profile": {"x": [[1, 96], [8, 96], [32, 96]]}, "workspace_mb": 4096}),
                dict(flags={"precision": "tf32", "profile": {"x": [[1, 96], [8, 96], [64, 96]]}, "workspace_mb": 1})]
    keys = {B.engine_cache_key(_parts(**v)) for v in variants}
    assert k0 not in keys and len(keys) == len(variants)


def test_cache_key_ignores_flag_order():
    a = _parts(flags={"precision": "tf32", "workspace_mb": 1})
    b = _parts(flags={"workspace_mb": 1, "precision": "tf32"})
    assert B.engine_cache_key(a) == B.engine_cache_key(b)


def test_onnx_content_hash_covers_external_data(tmp_path):
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])],
        initializer=[onnx.numpy_helper.from_array(np.arange(1024, dtype=np.float32), "w")]))
    p = tmp_path / "ext.onnx"
    onnx.save(m, str(p), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
              size_threshold=0)
    h1 = B.onnx_content_hash(p)
    data = bytearray((tmp_path / "ext.data").read_bytes())
    data[10] ^= 0xFF
    (tmp_path / "ext.data").write_bytes(bytes(data))
    assert B.onnx_content_hash(p) != h1  # the .onnx file is unchanged; the weights are not


def test_build_flags_shape():
    f = B.build_flags("fp16", {"x": ((1, 2), (3, 2), (4, 2))}, 512)
    assert f == {"precision": "fp16", "profile": {"x": [[1, 2], [3, 2], [4, 2]]}, "workspace_mb": 512}


# ---- progress --------------------------------------------------------------------------------------------------------

def test_progress_renderer_nested_phases_and_cancel():
    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=False, width=100)
    r = B.ProgressRenderer(console=console)
    with r:
        r.phase_start("Building engine", None, 3)
        r.phase_start("Tactic selection", "Building engine", 10)
        assert r.step_complete("Tactic selection", 0) is True
        r.phase_finish("Tactic selection")
        assert r.step_complete("Building engine", 0) is True
        r.cancel()
        assert r.step_complete("Building engine", 1) is False  # TensorRT stops the build
        r.phase_finish("Building engine")
    assert r.events[0] == ("start", "Building engine", None, 3)
    assert ("finish", "Tactic selection") in r.events
    assert not r._tasks  # every phase closed
    assert "Building engine" in console.file.getvalue()


def test_progress_monitor_subclasses_trt_interface():
    class FakeMonitorBase:  # stands in for trt.IProgressMonitor
        def __init__(self):
            self.base_init = True

    class FakeTrt:
        IProgressMonitor = FakeMonitorBase

    r = B.ProgressRenderer(enabled=False)
    m = B.make_progress_monitor(FakeTrt, r)
    assert isinstance(m, FakeMonitorBase) and m.base_init
    m.phase_start("p", None, 2)
    assert m.step_complete("p", 0)
    m.phase_finish("p")
    assert [e[0] for e in r.events] == ["start", "step", "finish"]


# ---- build_engine argument checks (all before TensorRT is imported) ---------------------------------------------------

def test_build_engine_argument_errors(tmp_path):
    p = _model(tmp_path, [("x", ["b", 4], TensorProto.FLOAT)])
    with pytest.raises(FusedopsError, match="ONNX model not found"):
        B.build_engine(tmp_path / "missing.onnx", tmp_path / "e.plan")
    with pytest.raises(FusedopsError, match="unknown precision"):
        B.build_engine(p, tmp_path / "e.plan", precision="int4")
    with pytest.raises(FusedopsError, match="min_batch <= opt_batch <= max_batch"):
        B.build_engine(p, tmp_path / "e.plan", min_batch=8, max_batch=4)
    with pytest.raises(FusedopsError, match="workspace_mb"):
        B.build_engine(p, tmp_path / "e.plan", workspace_mb=0)
    (tmp_path / "exists.plan").write_bytes(b"x")
    with pytest.raises(FusedopsError, match="already exists; pass --force"):
        B.build_engine(p, tmp_path / "exists.plan")
    with pytest.raises(FusedopsError, match="plugin library not found"):
        B.build_engine(p, tmp_path / "e.plan", plugin_library=tmp_path / "nope.so")


def test_build_engine_needs_plugin_for_fused_models(tmp_path, monkeypatch):
    monkeypatch.setattr(B, "default_plugin_library", lambda: None)
    p = _model(tmp_path, [("x", ["b", 4], TensorProto.FLOAT)], fused=True)
    with pytest.raises(FusedopsError, match="fusedops nodes but no plugin library"):
        B.build_engine(p, tmp_path / "e.plan")


def test_build_engine_without_tensorrt_says_so(tmp_path, monkeypatch):
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here; this checks the message where it is not")
    monkeypatch.setattr(B, "default_plugin_library", lambda: None)
    p = _model(tmp_path, [("x", ["b", 4], TensorProto.FLOAT)])
    with pytest.raises(FusedopsError, match="TensorRT's Python package is not usable"):
        B.build_engine(p, tmp_path / "e.plan")


def test_cli_arguments_round_trip(monkeypatch):
    from fusedops.cli import build as build_command

    parser = argparse.ArgumentParser()
    build_command.add_arguments(parser)
    args = parser.parse_args(["m.onnx", "--engine", "m.plan", "--precision", "fp16", "--min-batch", "2",
                              "--opt-batch", "16", "--max-batch", "64", "--workspace-mb", "512",
                              "--timing-cache", "t.cache", "--cache-dir", "cache", "--plugin-library", "p.so",
                              "--force", "--no-progress", "--max-shapes", "x:64x96"])
    seen = {}
    r = types.SimpleNamespace(cached=True, engine_path="m.plan", precision="fp16", notes=[])
    monkeypatch.setattr(B, "build_engine", lambda *a, **kw: seen.update(args=a, kw=kw) or r)
    assert build_command.run(args) == 0
    assert seen["args"] == ("m.onnx", "m.plan")
    assert seen["kw"] == dict(precision="fp16", min_batch=2, opt_batch=16, max_batch=64, workspace_mb=512,
                              timing_cache="t.cache", cache_dir="cache", plugin_library="p.so", force=True,
                              progress=False, shapes={"x": ((64, 96), (64, 96), (64, 96))})
    with pytest.raises(SystemExit):
        parser.parse_args(["m.onnx", "--engine", "e", "--precision", "int8"])
    defaults = parser.parse_args(["m.onnx", "--engine", "e"])
    assert (defaults.precision, defaults.min_batch, defaults.opt_batch, defaults.max_batch) == ("tf32", 1, None, None)


def test_api_build_calls_build_engine(monkeypatch):
    from fusedops import api

    seen = {}
    monkeypatch.setattr(B, "build_engine", lambda *a, **kw: seen.update(args=a, kw=kw) or "result")
    assert api.build("m.onnx", "m.plan", precision="fp32", max_batch=8) == "result"
    assert seen == {"args": ("m.onnx", "m.plan"), "kw": {"precision": "fp32", "max_batch": 8}}


# ---- fp32 with TF32 plugin nodes -------------------------------------------------------------------------------------

def _gemm_model(tmp_path, allow_tf32_values):
    """A model with one fusedops GemmGroupNormAct node per value (None: attribute absent)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])
    nodes, outs = [], []
    for k, v in enumerate(allow_tf32_values):
        attrs = {"num_groups": 1} if v is None else {"num_groups": 1, "allow_tf32": v}
        nodes.append(helper.make_node("GemmGroupNormAct", ["x", "w", "w0", "w0", "w0"], [f"y{k}"], name=f"gemm{k}",
                                      domain="fusedops", **attrs))
        outs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None))
    inits = [helper.make_tensor("w", TensorProto.FLOAT, [2, 4], [0.0] * 8),
             helper.make_tensor("w0", TensorProto.FLOAT, [2], [0.0] * 2)]
    g = helper.make_graph(nodes, "g", [x], outs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("fusedops", 1)])
    p = tmp_path / "gemm.onnx"
    onnx.save(m, str(p))
    return p


def test_tf32_plugin_nodes(tmp_path):
    assert B.tf32_plugin_nodes(_gemm_model(tmp_path, [1, 0, None])) == ["gemm0", "gemm2"]
    assert B.tf32_plugin_nodes(_gemm_model(tmp_path, [0])) == []


@pytest.mark.parametrize("precision,warned", [("fp32", True), ("tf32", False)])
def test_fp32_build_warns_about_tf32_plugin_nodes(tmp_path, monkeypatch, caplog, precision, warned):
    lib = tmp_path / "libfusedops_trt.so"
    lib.write_bytes(b"")

    def no_tensorrt():
        raise FusedopsError("stop before TensorRT")

    monkeypatch.setattr(B, "_import_tensorrt", no_tensorrt)
    p = _gemm_model(tmp_path, [1, 0])
    with caplog.at_level("WARNING", logger="fusedops.trt_build"), pytest.raises(FusedopsError, match="stop before"):
        B.build_engine(p, tmp_path / "e.plan", precision=precision, plugin_library=lib)
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    if warned:
        assert len(messages) == 1 and "gemm0" in messages[0] and "gemm1" not in messages[0], messages
        assert "allow_tf32=0" in messages[0]
    else:
        assert messages == []


# ---- verify / bench availability --------------------------------------------------------------------------------------

def test_trt_available_names_each_missing_piece(monkeypatch):
    import sys
    import types

    import torch

    V = importlib.import_module("fusedops.workflows.verify")

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    assert V._trt_available().startswith("TensorRT not importable")
    monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    assert V._trt_available().startswith("pycuda not importable")
    pycuda = types.ModuleType("pycuda")
    pycuda.driver = types.ModuleType("pycuda.driver")
    monkeypatch.setitem(sys.modules, "pycuda", pycuda)
    monkeypatch.setitem(sys.modules, "pycuda.driver", pycuda.driver)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert V._trt_available() == "no CUDA device"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(B, "default_plugin_library", lambda: None)
    assert "plugin library not built" in V._trt_available()
    monkeypatch.setattr(B, "default_plugin_library", lambda: "/x/libfusedops_trt.so")
    assert V._trt_available() is None


def test_trt_bench_unavailable_gives_no_rows(monkeypatch):
    from fusedops.benchmark import trt_rows as trt_bench

    V = importlib.import_module("fusedops.workflows.verify")

    monkeypatch.setattr(V, "_trt_available", lambda: "TensorRT not importable (ImportError)")
    assert trt_bench.unavailable_reason() == "TensorRT not importable (ImportError)"
    assert trt_bench.trt_rows("1", "small", repeats=2, warmup=1) == []


def test_trt_bench_unavailable_here():
    from fusedops.benchmark import trt_rows as trt_bench

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    reason = trt_bench.unavailable_reason()
    assert reason and reason.startswith("TensorRT not importable")
    assert trt_bench.trt_rows("1", "small") == []


def test_trt_bench_helpers():
    from fusedops.benchmark import trt_rows as trt_bench

    assert trt_bench.rotation_count(1 << 20) == 4
    assert trt_bench.rotation_count(600 << 20) == 1
    assert trt_bench.rotation_count(300 << 20) == 3
    row = trt_bench.summarise("m", "tf32", 8, [3.0, 1.0, 2.0])
    assert row == {"model": "m", "backend": "trt", "precision": "tf32", "batch": 8, "median_ms": 2.0, "min_ms": 1.0,
                   "max_ms": 3.0, "runs": 3}
    with pytest.raises(FusedopsError, match="no TensorRT timings"):
        trt_bench.summarise("m", "tf32", 8, [])


def test_trt_bench_rows_have_the_ort_bench_keys():
    from fusedops.benchmark import trt_rows as trt_bench

    row = trt_bench.summarise("m", "fp32", 1, [1.0])
    assert set(row) == {"model", "backend", "precision", "batch", "median_ms", "min_ms", "max_ms", "runs"}


def test_with_allow_tf32_sets_the_plugin_field(tmp_path):
    from fusedops.benchmark import trt_rows as trt_bench

    model = onnx.load(str(_gemm_model(tmp_path, [1, None, 0])))
    strict = trt_bench.with_allow_tf32(model, 0)
    p = tmp_path / "strict.onnx"
    onnx.save(strict, str(p))
    assert B.tf32_plugin_nodes(p) == []
    assert [a.name for a in strict.graph.node[0].attribute].count("allow_tf32") == 1
    assert len(B.tf32_plugin_nodes(_gemm_model(tmp_path, [1, None, 0]))) == 2  # the original is untouched
