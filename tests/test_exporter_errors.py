"""Bad input to the exporter API: a FusedopsError whose one-line message names the problem; inputs untouched,
nothing half-written."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fusedops import exporter_api
from fusedops.errors import FusedopsError
from fusedops.exporter import fuse_model


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


def _group_normalization_model(channels: int, groups: int, opset: int = 21) -> onnx.ModelProto:
    scale_len = channels if opset >= 21 else groups
    graph = helper.make_graph(
        [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=groups, name="gn")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, 4])],
        [onnx.numpy_helper.from_array(np.ones(scale_len, np.float32), "scale"),
         onnx.numpy_helper.from_array(np.zeros(scale_len, np.float32), "bias")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


@pytest.fixture(scope="module")
def plain_onnx(tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "plain.onnx"
    exporter_api.export_unfused("1", path)
    return path


def test_missing_input_file(tmp_path):
    with pytest.raises(FusedopsError) as e:
        exporter_api.fuse_file(tmp_path / "nope.onnx", tmp_path / "out.onnx")
    assert "does not exist" in _one_line(e) and "nope.onnx" in str(e.value)
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("content", [b"this is not a protobuf \xff\xfe\x00 at all", b"", b"\x08\x07"])
def test_not_an_onnx_file(tmp_path, content):
    src = tmp_path / "bad.onnx"
    src.write_bytes(content)
    with pytest.raises(FusedopsError) as e:
        exporter_api.fuse_file(src, tmp_path / "out.onnx")
    assert "not an ONNX file" in _one_line(e)
    assert src.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]


def test_existing_output_is_refused_without_force(plain_onnx, tmp_path):
    dst = tmp_path / "out.onnx"
    dst.write_bytes(b"keep me")
    with pytest.raises(FusedopsError) as e:
        exporter_api.fuse_file(plain_onnx, dst)
    assert "exists" in _one_line(e) and "force" in str(e.value)
    assert dst.read_bytes() == b"keep me"
    with pytest.raises(FusedopsError, match="exists"):
        exporter_api.export("1", dst)
    assert dst.read_bytes() == b"keep me"
    # with force it is replaced by a valid fused model
    exporter_api.fuse_file(plain_onnx, dst, force=True)
    assert exporter_api.fusion_summary(dst)[0][0] == "GemmGroupNormAct"


def test_input_file_is_never_overwritten_even_with_force(plain_onnx, tmp_path):
    before = _digest(plain_onnx)
    for force in (False, True):
        with pytest.raises(FusedopsError) as e:
            exporter_api.fuse_file(plain_onnx, plain_onnx, force=force)
        assert "input" in _one_line(e)
    # the same file under another spelling of its path
    alias = plain_onnx.parent / "." / plain_onnx.name
    with pytest.raises(FusedopsError, match="input"):
        exporter_api.fuse_file(plain_onnx, alias, force=True)
    assert _digest(plain_onnx) == before


def test_unknown_model_name(tmp_path):
    with pytest.raises(FusedopsError) as e:
        exporter_api.export("resnet9000", tmp_path / "m.onnx")
    msg = _one_line(e)
    assert "resnet9000" in msg and "matmul_groupnorm_leakyrelu_sum" in msg
    assert not any(tmp_path.iterdir())


def test_bad_size(tmp_path):
    with pytest.raises(FusedopsError, match="size"):
        exporter_api.export("1", tmp_path / "m.onnx", size="huge")


def test_output_folder_missing(plain_onnx, tmp_path):
    with pytest.raises(FusedopsError, match="does not exist"):
        exporter_api.fuse_file(plain_onnx, tmp_path / "no" / "such" / "dir" / "out.onnx")


@pytest.mark.parametrize("opset", [18, 21])
def test_channels_not_divisible_by_num_groups(tmp_path, opset):
    src = tmp_path / "gn.onnx"
    onnx.save(_group_normalization_model(channels=6, groups=4, opset=opset), str(src))
    before = _digest(src)
    with pytest.raises(FusedopsError) as e:
        exporter_api.fuse_file(src, tmp_path / "out.onnx")
    msg = _one_line(e)
    assert "C=6" in msg and "num_groups=4" in msg and "divisible" in msg
    assert _digest(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gn.onnx"]


def test_valid_group_normalization_file_fuses(tmp_path):
    src = tmp_path / "gn.onnx"
    onnx.save(_group_normalization_model(channels=6, groups=3), str(src))
    out = exporter_api.fuse_file(src, tmp_path / "out.onnx")
    assert [op for op, _ in exporter_api.fusion_summary(out)] == ["GroupNormAct"]


def test_unsupported_opset():
    model = _group_normalization_model(channels=6, groups=3)
    model.opset_import[0].version = 13
    with pytest.raises(FusedopsError, match="opset is 13"):
        fuse_model(model)


def test_fuse_model_rejects_non_models():
    with pytest.raises(FusedopsError, match="ModelProto"):
        fuse_model(b"bytes")


def test_malformed_fusedops_node_is_named(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("GroupNormAct", ["x", "g", "b"], ["y"], domain="fusedops", name="mine", num_groups=2,
                          post="relu;frobnicate")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 3])],
        [onnx.numpy_helper.from_array(np.ones(4, np.float32), "g"),
         onnx.numpy_helper.from_array(np.zeros(4, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("fusedops", 1)],
                              ir_version=10)
    with pytest.raises(FusedopsError) as e:
        fuse_model(model)
    assert "mine" in _one_line(e) and "frobnicate" in str(e.value)
