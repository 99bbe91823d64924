"""The serving backends and the batching of `fusedops serve`'s inference function, without a server."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fusedops import ort as fo_ort
from fusedops.errors import FusedopsError
from fusedops.models.registry import get_entry
from fusedops.serve import backends as B
from fusedops.serve.server import make_infer

needs_lib = pytest.mark.skipif(fo_ort.unavailable_reason() is not None, reason=f"{fo_ort.unavailable_reason()}")


def _eager(key, x):
    with torch.no_grad():
        return get_entry(key).build("small").double()(torch.from_numpy(x).double()).numpy()


@needs_lib
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU choice; tests/gpu covers the GPU order")
def test_auto_on_a_cpu_machine_is_ort_cpu_for_a_model_key():
    assert B.choose_backend("1") == ("ort-cpu", "model")
    served = B.open_backend("1")
    assert served.batched and [t.name for t in served.inputs] == ["input"]
    x = np.random.default_rng(3).random((5, 96), dtype=np.float32)
    np.testing.assert_allclose(served.infer({"input": x})["output"], _eager("1", x), atol=1e-4, rtol=1e-4)


def test_torch_eager_backend_matches_eager():
    served = B.open_backend("3", "torch-eager")
    assert served.inputs[0].shape == (-1, 96) and served.outputs[0].shape == (-1, 160)
    x = np.random.default_rng(4).random((2, 96), dtype=np.float32)
    np.testing.assert_allclose(served.infer({"input": x})["output"], _eager("3", x), atol=1e-4, rtol=1e-4)


def test_torch_backends_refuse_a_model_without_batch_in_dim_0():
    with pytest.raises(FusedopsError, match="does not keep the batch"):
        B.open_backend("2", "torch-eager")


@pytest.mark.parametrize("source,backend,words", [
    ("nope.onnx", "auto", "not found"), ("9", "auto", "neither an .onnx"), ("1", "trt", "TensorRT engine"),
    ("1", "fast", "unknown backend"),
])
def test_backend_errors_name_the_problem(source, backend, words):
    with pytest.raises(FusedopsError, match=words):
        B.choose_backend(source, backend)


def _fake(batched=True):
    spec_in = B.TensorSpec("input", np.dtype(np.float32), (-1, 3) if batched else (-1, 3))
    spec_out = B.TensorSpec("output", np.dtype(np.float32), (-1, 3) if batched else (1, -1))
    calls = []

    def infer(feeds):
        calls.append(feeds["input"].shape[0])
        return {"output": feeds["input"] * 2 if batched else (feeds["input"].sum(1) + 0)[None]}

    return B.ServedModel("fake", "fake", [spec_in], [spec_out], infer, "cpu"), calls


def test_requests_of_a_dynamic_batch_run_once_and_split_back():
    served, calls = _fake()
    requests = [{"input": np.full((n, 3), k, np.float32)} for k, n in enumerate([1, 4, 2])]
    out = make_infer(served, 64)(requests)
    assert calls == [7]  # one call for the whole batch
    for k, (req, res) in enumerate(zip(requests, out)):
        np.testing.assert_array_equal(res["output"], req["input"] * 2)


def test_unbatched_requests_run_one_by_one_and_are_bounded():
    served, calls = _fake(batched=False)
    assert not served.batched
    infer = make_infer(served, 4)
    out = infer([{"input": np.ones((2, 3), np.float32)}, {"input": np.ones((3, 3), np.float32)}])
    assert calls == [2, 3] and out[1]["output"].shape == (1, 3)
    with pytest.raises(ValueError, match="at most 4"):
        infer([{"input": np.ones((5, 3), np.float32)}])


@pytest.mark.parametrize("url,ok", [("127.0.0.1:8001", True), ("localhost:8000", True), ("[::1]:8001", True),
                                    ("http://127.0.0.5:8000/", True), ("10.0.0.1:8001", False),
                                    ("127.0.0.1", False), ("example.com:80", False)])
def test_loadtest_accepts_loopback_urls_only(url, ok):
    from fusedops.serve.loadtest import check_url

    if ok:
        assert check_url(url)[1] in (8000, 8001)
    else:
        with pytest.raises(FusedopsError):
            check_url(url)


def test_compare_counts_nan_and_shape_as_wrong():
    from fusedops.serve.loadtest import compare

    ref = {"output": np.ones((2, 3))}
    assert compare({"output": np.ones((2, 3), np.float32)}, ref, 1e-4, 1e-4) is None
    assert "shape" in compare({"output": np.ones((3, 2), np.float32)}, ref, 1e-4, 1e-4)
    y = np.ones((2, 3), np.float32)
    y[1, 2] = np.nan
    assert "1 elements off" in compare({"output": y}, ref, 1e-4, 1e-4)
    assert "missing" in compare({}, ref, 1e-4, 1e-4)


def test_report_files_and_summary(tmp_path):
    from fusedops.serve.report import summary_lines, write_report

    point = dict(concurrency=1, batch=1, duration_s=1.0, requests=10, timed_requests=8, ok=10, wrong=0, errors=0,
                 lost=0, p50_ms=1.0, p90_ms=1.5, p99_ms=2.0, mean_ms=1.1, throughput_req_s=8.0,
                 throughput_inf_s=8.0, first_problems=[])
    result = dict(url="127.0.0.1:1", protocol="grpc", model="m", reference="1", reference_kind="torch",
                  tolerance="fp32", points=[point, {**point, "concurrency": 8, "p50_ms": 3.0}], ok=True)
    paths = write_report(result, tmp_path / "new")
    assert [p.name for p in paths] == ["loadtest.json", "loadtest.png"] and paths[1].stat().st_size > 10_000
    assert summary_lines(result)[-1] == "all responses correct, none lost"
