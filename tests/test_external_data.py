"""Models with external data: fused in bounded memory and written next to the output (> 2 GB models made on the fly
with sparse weight files, float32 and float16), bad external locations rejected with one clear error, and no file
of the input ever overwritten."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from fusedops import exporter_api
from fusedops.errors import FusedopsError
from large_model import external_tensor_info, make_large_gemm_model, read_at

TESTS = Path(__file__).resolve().parent

FUSE_AND_MEASURE = textwrap.dedent("""
    import json, resource, sys
    from fusedops.exporter_api import fuse_file
    r = fuse_file(sys.argv[1], sys.argv[2])
    print(json.dumps({"summary": r.report.summary(), "data": str(r.data_path),
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_model_over_2gb_fuses_in_bounded_memory(tmp_path, dtype):
    """A 2.1 GB weight (sparse file): fused in a fresh process whose peak RSS stays far below the weight's size
    (measured ~320 MiB, mostly torch's import), written as external data next to the output, W's bytes copied."""
    k, c = 16384, (2**31 + 2**27) // (16384 * np.dtype(dtype).itemsize) // 32 * 32
    src, marks = make_large_gemm_model(tmp_path, k, c, dtype)
    weight_bytes = k * c * np.dtype(dtype).itemsize
    assert weight_bytes > 2**31
    dst = tmp_path / "fused.onnx"
    proc = subprocess.run([sys.executable, "-c", FUSE_AND_MEASURE, str(src), str(dst)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(TESTS)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["summary"] == "fused 1 of 1 GroupNorms into 1 node(s) (GemmGroupNormAct x1)"
    assert out["peak_mib"] * 2**20 < 0.5 * weight_bytes, out  # not even one copy of the weights in memory
    model = onnx.load(str(dst), load_external_data=False)
    assert [n.op_type for n in model.graph.node] == ["GemmGroupNormAct"]
    assert dst.stat().st_size < 2**20  # the tensors are in the data file
    data, offset, length = external_tensor_info(dst, "W")
    assert data == tmp_path / "fused.onnx.data" and length == weight_bytes and Path(out["data"]) == data
    for off, block in marks.items():
        assert read_at(data, offset + off, len(block)) == block
    onnx.checker.check_model(str(dst), full_check=True)
    data.unlink()  # 2 GB of the test machine's disk


def _small_external_model(folder: Path, location: str = "m.onnx.data") -> Path:
    """A runnable model whose weight W (64 x 32) is external data at ``location``."""
    src, _ = make_large_gemm_model(folder, 64, 32, np.float32, groups=4, name="m")
    m = onnx.load(str(src), load_external_data=False)
    w = next(t for t in m.graph.initializer if t.name == "W")
    for e in w.external_data:
        if e.key == "location":
            e.value = location
    onnx.save(m, str(src))
    return src


def test_small_external_model_runs_the_same_after_fusing(tmp_path):
    src = _small_external_model(tmp_path)
    result = exporter_api.fuse_file(src, tmp_path / "out.onnx")
    assert result.data_path == tmp_path / "out.onnx.data"
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ys = [ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
          for p in (src, result.path)]
    np.testing.assert_allclose(ys[1], ys[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("location,fragment", [
    ("/etc/passwd", "an absolute path; external data must lie inside the model's folder"),
    ("../outside.data", "which leaves the model's folder ('..')"),
    ("sub/../../outside.data", "which leaves the model's folder ('..')"),
    ("missing.data", "which does not exist"),
    ("link.data", "reached through the symbolic link"),
    ("short.data", "but the file has 16 bytes"),
])
def test_bad_external_locations_are_rejected(tmp_path, location, fragment):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (tmp_path / "outside.data").write_bytes(b"\0" * 64 * 32 * 4)
    (model_dir / "link.data").symlink_to(tmp_path / "outside.data")
    (model_dir / "short.data").write_bytes(b"\0" * 16)
    src = _small_external_model(model_dir, location)
    with pytest.raises(FusedopsError) as e:
        exporter_api.fuse_file(src, tmp_path / "out.onnx")
    msg = str(e.value)
    assert fragment in msg and "tensor 'W'" in msg and "\n" not in msg
    assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "out.onnx.data").exists()


def test_input_data_and_existing_output_data_are_never_overwritten(tmp_path):
    src = _small_external_model(tmp_path, "w.data")
    os.replace(tmp_path / "m.onnx.data", tmp_path / "w.data")
    before = (tmp_path / "w.data").read_bytes()
    with pytest.raises(FusedopsError, match="w.data' is the input file; refusing to overwrite the input"):
        exporter_api.fuse_file(src, tmp_path / "w", force=True)  # its data file would be w.data
    assert (tmp_path / "w.data").read_bytes() == before and not (tmp_path / "w").exists()
    (tmp_path / "out.onnx.data").write_bytes(b"user's file")
    with pytest.raises(FusedopsError, match=r"out.onnx.data' exists; pass --force \(force=True\)"):
        exporter_api.fuse_file(src, tmp_path / "out.onnx")
    assert (tmp_path / "out.onnx.data").read_bytes() == b"user's file" and not (tmp_path / "out.onnx").exists()
    exporter_api.fuse_file(src, tmp_path / "out.onnx", force=True)
    assert (tmp_path / "out.onnx.data").stat().st_size == 64 * 32 * 4
