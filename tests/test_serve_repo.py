"""`fusedops repo`: the Triton model repository's config.pbtxt parses against Triton's model-config schema (protobuf
text format with tritonclient's model_config_pb2, and tritonserver itself reading it), names the library that is
there, and carries the exported model's real tensor names."""

from __future__ import annotations

import filecmp
import os
import subprocess
from pathlib import Path

import onnx
import pytest

pytest.importorskip("tritonclient.grpc", reason="tritonclient (the serve extra) is not installed")

from fusedops import ort as fo_ort  # noqa: E402
from fusedops.api import export  # noqa: E402
from fusedops.errors import FusedopsError  # noqa: E402
from fusedops.exporter.export import INPUT_NAME, OUTPUT_NAME  # noqa: E402
from fusedops.serve import repository as R  # noqa: E402

pytestmark = pytest.mark.skipif(fo_ort.unavailable_reason() is not None,
                                reason=f"libfusedops_ort.so not built: {fo_ort.unavailable_reason()}")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("repo-src")
    return {k: Path(export(k, str(folder / f"model{k}.onnx"))) for k in ("1", "2")}


def _read_config(result: R.RepoResult):
    return R.parse_config(result.config_path.read_text())


def test_exported_tensors_have_real_names(exported):
    for path in exported.values():
        g = onnx.load(str(path)).graph
        assert [i.name for i in g.input] == [INPUT_NAME] == ["input"]
        assert [o.name for o in g.output] == [OUTPUT_NAME] == ["output"]


def test_onnx_repository_config(exported, tmp_path):
    result = R.write_repository(R.RepoOptions(source=str(exported["1"]), out=str(tmp_path / "repo"),
                                              max_batch_size=48, max_queue_delay_us=250, instances=2))
    cfg = _read_config(result)
    pb = R.model_config_pb2()
    assert cfg.name == "fusedops" and cfg.platform == "onnxruntime_onnx"
    assert cfg.max_batch_size == 48 and cfg.dynamic_batching.max_queue_delay_microseconds == 250
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [("input", pb.TYPE_FP32, [96])]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [("output", pb.TYPE_FP32, [160])]
    assert cfg.instance_group[0].count == 2 and cfg.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
    (lib,) = cfg.model_operations.op_library_filename
    assert Path(lib).is_file() and Path(lib) == result.library_path.resolve()
    assert filecmp.cmp(lib, fo_ort.library_path(), shallow=False)  # the library that exists, copied whole
    assert filecmp.cmp(result.model_dir / "1" / "model.onnx", exported["1"], shallow=False)
    assert result.command == f"tritonserver --model-repository={(tmp_path / 'repo').resolve()}"


def test_server_path_is_used_for_the_library(exported, tmp_path):
    result = R.write_repository(R.RepoOptions(source=str(exported["1"]), out=str(tmp_path / "repo"),
                                              server_path="/models/"))
    assert list(_read_config(result).model_operations.op_library_filename) == ["/models/fusedops/libfusedops_ort.so"]
    assert result.command == "tritonserver --model-repository=/models"


def test_unbatched_model_gets_full_shapes_and_no_batcher(exported, tmp_path):
    result = R.write_repository(R.RepoOptions(source=str(exported["2"]), out=str(tmp_path / "repo")))
    cfg = _read_config(result)
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [-1, 96] and list(cfg.output[0].dims) == [1, 160, -1, 1]
    assert not result.batched and any("unbatched" in n for n in result.notes)


def test_parse_config_rejects_what_triton_would(exported):
    with pytest.raises(FusedopsError, match="does not parse"):
        R.parse_config('name: "m"\nmax_batch_sise: 4\n')
    with pytest.raises(FusedopsError, match="does not parse"):
        R.parse_config('name: "m"\ninstance_group { kind: KIND_TPU }\n')


def test_engine_repository_config(exported, tmp_path, monkeypatch):
    """The tensorrt_plan model; the plugin library is a stand-in file here (the real one needs the CUDA kernels)."""
    from fusedops.plugins import native

    plugin = tmp_path / "libfusedops_trt.so"
    plugin.write_bytes(b"\x7fELF stand-in")
    monkeypatch.setattr(native, "library_path", lambda name: plugin if name == "fusedops_trt" else None)
    engine = tmp_path / "m1.plan"
    engine.write_bytes(b"engine bytes")
    (tmp_path / "m1.plan.json").write_text('{"profile": {"input": [[1, 96], [8, 96], [32, 96]]}}')
    result = R.write_repository(R.RepoOptions(source=str(engine), onnx=str(exported["1"]),
                                              out=str(tmp_path / "repo"), model_name="m1_trt"))
    cfg = _read_config(result)
    pb = R.model_config_pb2()
    assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == 32  # the engine profile's max batch
    assert cfg.instance_group[0].kind == pb.ModelInstanceGroup.KIND_GPU
    assert not cfg.HasField("model_operations")
    assert (result.model_dir / "1" / "model.plan").read_bytes() == b"engine bytes"
    lib = result.model_dir / "libfusedops_trt.so"
    assert lib.read_bytes() == plugin.read_bytes()
    assert result.command.endswith(f"--backend-config=tensorrt,plugins={lib.resolve()}")


@pytest.mark.parametrize("case,words", [
    ("missing", "not found"), ("txt", "neither an .onnx"), ("engine_without_onnx", "pass --onnx"),
    ("bad_name", "model name"), ("exists", "--force"),
])
def test_repo_errors(exported, tmp_path, case, words):
    o = R.RepoOptions(source=str(exported["1"]), out=str(tmp_path / "repo"))
    if case == "missing":
        o.source = str(tmp_path / "nope.onnx")
    elif case == "txt":
        o.source = str(tmp_path / "model.txt")
        Path(o.source).write_text("x")
    elif case == "engine_without_onnx":
        o.source = str(tmp_path / "m.plan")
        Path(o.source).write_bytes(b"x")
    elif case == "bad_name":
        o.model_name = "a/b"
    elif case == "exists":
        R.write_repository(R.RepoOptions(source=str(exported["1"]), out=str(tmp_path / "repo")))
        (tmp_path / "repo" / "fusedops" / "keep.txt").write_text("user file")
    with pytest.raises(FusedopsError, match=words):
        R.write_repository(o)
    if case == "exists":  # nothing the user had was touched
        assert (tmp_path / "repo" / "fusedops" / "keep.txt").read_text() == "user file"


def test_repo_cli(exported, tmp_path, capsys):
    from fusedops.cli import main

    assert main(["repo", str(exported["1"]), "--out", str(tmp_path / "r")]) == 0
    assert "tritonserver --model-repository=" in capsys.readouterr().out
    assert main(["repo", str(exported["1"]), "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.startswith("fusedops: error: model folder")


def _bundled_tritonserver():
    try:
        import pytriton
    except ImportError:
        return None
    root = Path(pytriton.__file__).parent
    binary = root / "tritonserver" / "bin" / "tritonserver"
    return (binary, root.parent / "nvidia_pytriton.libs") if binary.is_file() else None


def _tritonserver_reads(repo: Path, tmp_path: Path) -> str:
    found = _bundled_tritonserver()
    if found is None:
        pytest.skip("no tritonserver binary here (PyTriton's wheel carries one)")
    binary, libs = found
    from fusedops.serve.process import free_loopback_ports

    http, grpc = free_loopback_ports(2)
    env = {**os.environ, "LD_LIBRARY_PATH": f"{libs}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    # No backends folder: the server reads and checks every config, then cannot find the onnxruntime backend.
    r = subprocess.run([str(binary), f"--model-repository={repo}", f"--backend-directory={tmp_path / 'none'}",
                        "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1",
                        f"--grpc-port={grpc}", "--allow-metrics=false", "--exit-on-error=true"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode != 0
    return r.stdout + r.stderr


def test_tritonserver_itself_reads_the_config(exported, tmp_path):
    """PyTriton's tritonserver (it has only the Python backend) parses our config.pbtxt and fails only on the
    missing onnxruntime backend; a corrupted config fails earlier, on the text proto (the control)."""
    R.write_repository(R.RepoOptions(source=str(exported["1"]), out=str(tmp_path / "repo")))
    log = _tritonserver_reads(tmp_path / "repo", tmp_path)
    assert "unable to find backend library for backend 'onnxruntime'" in log, log[-2000:]
    cfg = tmp_path / "repo" / "fusedops" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("max_batch_size", "max_batch_sise"))
    log = _tritonserver_reads(tmp_path / "repo", tmp_path)
    assert "unable to find backend library" not in log and "max_batch_sise" in log, log[-2000:]
