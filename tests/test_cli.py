"""The console script: bad input gives a one-line error naming the problem and a non-zero exit, never a traceback;
nothing the user gave is overwritten."""

import hashlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest
from onnx import TensorProto, helper

import fusedops.cli


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fusedops", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def assert_clean_error(proc, *fragments):
    assert proc.returncode != 0, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("fusedops: error:")]
    assert len(lines) == 1, proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def group_norm_model(path: Path, channels: int, groups: int):
    """A tiny standard-ONNX model with GroupNormalization (opset 21)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, 4])
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [channels], [1.0] * channels)
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [channels], [0.0] * channels)
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=groups, epsilon=1e-5)
    graph = helper.make_graph([node], "gn", [x], [y], initializer=[scale, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, path)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_help_lists_the_subcommands():
    text = fusedops.cli.make_parser().format_help()
    for cmd in ("export", "fuse", "demo", "verify", "bench", "build", "build-native"):
        assert cmd in text


def test_unknown_model(tmp_path):
    assert_clean_error(run_cli("export", "resnet", "--out", str(tmp_path / "m.onnx")), "unknown model 'resnet'")


def test_missing_input_file(tmp_path):
    assert_clean_error(run_cli("fuse", str(tmp_path / "nope.onnx"), str(tmp_path / "out.onnx")), "nope.onnx")


def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is not a protobuf")
    assert_clean_error(run_cli("fuse", str(bad), str(tmp_path / "out.onnx")), "not an ONNX")
    assert bad.read_text() == "this is not a protobuf"


def test_output_exists_is_refused_without_force(tmp_path):
    src = group_norm_model(tmp_path / "gn.onnx", 8, 4)
    out = tmp_path / "out.onnx"
    out.write_bytes(b"keep me")
    assert_clean_error(run_cli("fuse", str(src), str(out)), "exists", "--force")
    assert out.read_bytes() == b"keep me"
    ok = run_cli("fuse", str(src), str(out), "--force")
    assert ok.returncode == 0, ok.stderr
    assert onnx.load(out).graph.node[0].op_type == "GroupNormAct"


def test_never_overwrites_the_input_even_with_force(tmp_path):
    src = group_norm_model(tmp_path / "gn.onnx", 8, 4)
    before = digest(src)
    assert_clean_error(run_cli("fuse", str(src), str(src), "--force"), "input")
    assert_clean_error(run_cli("fuse", str(src), str(tmp_path / "." / "gn.onnx"), "--force"), "input")
    assert digest(src) == before


def test_channels_not_divisible_by_groups(tmp_path):
    src = group_norm_model(tmp_path / "gn.onnx", 6, 4)
    out = tmp_path / "out.onnx"
    assert_clean_error(run_cli("fuse", str(src), str(out)), "not divisible", "num_groups=4")
    assert not out.exists()


def test_export_writes_a_fused_model(tmp_path):
    out = tmp_path / "m1.onnx"
    proc = run_cli("export", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    ops = [n.op_type for n in onnx.load(out).graph.node]
    assert ops == ["GemmGroupNormAct"]


@pytest.mark.parametrize("args, fragment", [
    (("verify", "1", "--backend", "nope"), "invalid choice"),
    (("demo", "--models", "nope"), "unknown model 'nope'"),
])
def test_argument_errors(args, fragment):
    proc = run_cli(*args)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and fragment in proc.stderr


def test_build_prints_the_engine_and_exits_zero(tmp_path, monkeypatch, capsys):
    from fusedops.trt_build import builder

    engine = tmp_path / "m.plan"
    seen = {}

    def fake_build(onnx, engine_path, **kw):
        seen["args"] = SimpleNamespace(onnx=onnx, **kw)
        return builder.BuildResult(engine_path=engine, cache_key="k", cached=cached, seconds=1.25, precision="fp32",
                                   profile={}, tensorrt_version="10.13", plugin_library=None,
                                   notes=["allow_tf32 note"])

    monkeypatch.setattr(builder, "build_engine", fake_build)
    for cached, how in ((False, "built in 1.2 s"), (True, "taken from the engine cache")):
        rc = fusedops.cli.main(["build", "m.onnx", "--engine", str(engine), "--precision", "fp32"])
        out, err = capsys.readouterr()
        assert rc == 0
        assert f"engine {engine} ({how}, precision fp32)" in out
        assert "note: allow_tf32 note" in err
        assert (seen["args"].onnx, seen["args"].precision) == ("m.onnx", "fp32")


def test_build_without_tensorrt_is_a_clean_error(tmp_path):
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    model = group_norm_model(tmp_path / "gn.onnx", 4, 2)
    proc = run_cli("build", str(model), "--engine", str(tmp_path / "gn.plan"), "--no-progress")
    assert_clean_error(proc, "TensorRT's Python package is not usable")
    assert not (tmp_path / "gn.plan").exists()
