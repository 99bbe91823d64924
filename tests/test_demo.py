"""The main job on a CPU machine: every reference model, every CPU backend, matches eager PyTorch."""

import io

import pytest
from rich.console import Console

from fusedops.workflows.demo import run_demo
from fusedops.errors import FusedopsError
from fusedops.workflows.verify import BACKENDS, verify


def test_demo_small_sizes_all_cpu_backends_pass(tmp_path):
    out = io.StringIO()
    results = run_demo(size="small", backends=["ort-cpu-functions", "ort-cpu", "torch-cpu"], repeats=2,
                       out_dir=str(tmp_path), console=Console(file=out, width=200))
    ran = [r for r in results if r.ok is not None]
    # The function-body and eager-fused backends need nothing native; they must always run here.
    assert {(r.model, r.backend) for r in ran} >= {(m, b) for m in {r.model for r in results}
                                                   for b in ("ort-cpu-functions", "torch-cpu")}
    assert len({r.model for r in results}) == 4
    assert all(r.ok for r in ran), out.getvalue()
    assert all(r.max_abs_err < 1e-4 for r in ran)
    text = out.getvalue()
    assert "max abs error" in text and "median latency" in text
    assert (tmp_path / "demo.json").exists()
    assert sorted(p.name for p in tmp_path.glob("*.fused.onnx")) == sorted(
        f"{m}.small.fused.onnx" for m in {r.model for r in results})


def test_unavailable_backends_are_reported_with_a_reason():
    out = io.StringIO()
    results = run_demo(models=["1"], size="small", backends=["trt"], repeats=1, console=Console(file=out))
    (r,) = results
    reason = BACKENDS["trt"].available()
    if reason:  # TensorRT (or pycuda, a GPU, the plugin library) missing: a skip naming why, in the table too
        assert r.ok is None and r.note == f"skipped: {reason}"
        assert "skipped" in out.getvalue()
    else:
        assert r.ok is True, r


def test_verify_ort_functions_at_odd_batch():
    r = verify("4", backend="ort-cpu-functions", batch=5)
    assert r.ok, r


def test_verify_rejects_unknown_backend_and_model():
    with pytest.raises(FusedopsError, match="unknown backend"):
        verify("1", backend="cuda-magic")
    with pytest.raises(FusedopsError, match="unknown model"):
        verify("resnet", backend="ort-cpu-functions")
    assert "ort-cpu-functions" in BACKENDS
