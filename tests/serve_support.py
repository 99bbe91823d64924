"""Client calls the serving tests share (tritonclient over loopback). Imported after the test modules'
``pytest.importorskip`` of the serve extra, so a machine without it skips those modules with the reason."""

from __future__ import annotations

import zlib

import numpy as np
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from fusedops.errors import FusedopsError
from fusedops.models.registry import get_entry
from fusedops.serve.native_repo import backend_library, onnxruntime_library

TIMEOUT_S = 30.0


def fresh(shape, tag: str) -> np.ndarray:
    """Random float32 input in [0, 1), seeded by the tag (fresh per check, reproducible)."""
    return np.random.default_rng(zlib.crc32(tag.encode())).random(shape, dtype=np.float32)


def eager_float64(key: str, x: np.ndarray) -> np.ndarray:
    """The reference model `key` (small size) in float64 on x: what every served response is checked against."""
    model = get_entry(key).build("small").double()
    with torch.no_grad():
        return model(torch.from_numpy(x).double()).numpy()


def http_infer(srv, x, dtype="FP32", name="input"):
    with httpclient.InferenceServerClient(srv.http_url, network_timeout=TIMEOUT_S) as c:
        inp = httpclient.InferInput(name, list(x.shape), dtype)
        inp.set_data_from_numpy(x)
        return c.infer(srv.model_name, [inp]).as_numpy("output")


def grpc_infer(srv, x):
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return c.infer(srv.model_name, [inp], client_timeout=TIMEOUT_S).as_numpy("output")


def native_unavailable() -> str | None:
    """Why fusedops' native Triton backend cannot be served here (None: it can)."""
    try:
        backend_library()
        onnxruntime_library()
    except FusedopsError as e:
        return str(e)
    return None
