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
