"""trt_build.runtime's pure-Python parts (no TensorRT, no GPU): device buffers from fake __cuda_array_interface__
objects, engine loading errors, output-buffer dtype checks against a fake engine, host bfloat16 arrays."""

from __future__ import annotations

import numpy as np
import pytest

from fusedops.errors import FusedopsError
from fusedops.trt_build import runtime as R


# ---- runtime buffer handling (no GPU: fake __cuda_array_interface__ objects) -------------------------------------------

class FakeCudaArray:
    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x1000, dtype=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}
        if dtype:
            self.dtype = dtype


def test_device_buffer_from_cuda_array():
    b = R.DeviceBuffer.from_cuda_array(FakeCudaArray((2, 3)))
    assert (b.ptr, b.shape, b.dtype) == (0x1000, (2, 3), np.float32)
    assert R.DeviceBuffer.from_cuda_array(FakeCudaArray((2, 3), strides=(12, 4))).shape == (2, 3)
    with pytest.raises(FusedopsError, match="not contiguous"):
        R.DeviceBuffer.from_cuda_array(FakeCudaArray((2, 3), strides=(4, 8)))
    bf = R.DeviceBuffer.from_cuda_array(FakeCudaArray((4,), typestr="<V2", dtype="torch.bfloat16"))
    assert bf.dtype == "bfloat16"
    with pytest.raises(FusedopsError, match="element type"):
        R.DeviceBuffer.from_cuda_array(FakeCudaArray((4,), typestr="<c8"))
    with pytest.raises(FusedopsError, match="not a CUDA buffer"):
        R.DeviceBuffer.from_cuda_array(np.zeros(3))


def test_engine_load_missing_file(tmp_path):
    with pytest.raises(FusedopsError, match="engine not found"):
        R.Engine.load(tmp_path / "none.plan")


class _FakeTrt:
    class DataType:
        FLOAT, HALF, BF16 = "FLOAT", "HALF", "BF16"

    @staticmethod
    def nptype(dt):
        return {"FLOAT": np.float32, "HALF": np.float16}[dt]


class _FakeContext:
    def set_input_shape(self, name, shape):
        return True

    def set_tensor_address(self, name, ptr):
        pass

    def get_tensor_shape(self, name):
        return (2, 3)


class _FakeTrtEngine:
    def __init__(self, dtypes):
        self.dtypes = dtypes

    def get_tensor_dtype(self, name):
        return self.dtypes[name]


def _fake_engine(out_dtype="FLOAT"):
    eng = R.Engine.__new__(R.Engine)
    eng.trt, eng.engine, eng.context = _FakeTrt, _FakeTrtEngine({"x": "FLOAT", "y": out_dtype}), _FakeContext()
    eng.input_names, eng.output_names, eng._owned, eng._stream = ["x"], ["y"], [], None
    return eng


def test_bind_checks_the_output_buffer_dtype():
    eng = _fake_engine()
    out = eng.bind({"x": FakeCudaArray((2, 3))}, {"y": FakeCudaArray((2, 3), ptr=0x2000)})
    assert out["y"].ptr == 0x2000
    with pytest.raises(FusedopsError, match="output 'y' buffer is <class 'numpy.float16'>, the engine writes float32"):
        eng.bind({"x": FakeCudaArray((2, 3))}, {"y": FakeCudaArray((2, 3), typestr="<f2")})
    with pytest.raises(FusedopsError, match="buffer has shape"):
        eng.bind({"x": FakeCudaArray((2, 3))}, {"y": FakeCudaArray((3, 2))})
    eng = _fake_engine("BF16")
    with pytest.raises(FusedopsError, match="output 'y' buffer is <class 'numpy.float32'>, the engine writes bfloat16"):
        eng.bind({"x": FakeCudaArray((2, 3))}, {"y": FakeCudaArray((2, 3))})
    eng.bind({"x": FakeCudaArray((2, 3))}, {"y": FakeCudaArray((2, 3), typestr="<V2", dtype="torch.bfloat16")})
    with pytest.raises(FusedopsError, match="input 'x' must be float32"):
        eng.bind({"x": FakeCudaArray((2, 3), typestr="<f2")})


def test_same_dtype():
    assert R.same_dtype(np.float32, np.dtype("float32")) and R.same_dtype("bfloat16", "bfloat16")
    assert not R.same_dtype("bfloat16", np.float16) and not R.same_dtype(np.float16, np.float32)


def test_host_array_bfloat16_keeps_the_bits():
    import torch

    t = torch.tensor([1.0, -2.5, 3.140625], dtype=torch.bfloat16)
    arr, dt = R.host_array(t)
    assert dt == "bfloat16" and arr.dtype == np.uint16 and arr.shape == (3,)
    back = (arr.astype(np.uint32) << 16).view(np.float32)
    assert back.tolist() == t.float().tolist()
    arr, dt = R.host_array(torch.ones(2, 2).t())  # non-contiguous torch tensor
    assert dt == np.float32 and arr.flags["C_CONTIGUOUS"]
    arr, dt = R.host_array([[1, 2]])
    assert arr.shape == (1, 2) and dt == arr.dtype
