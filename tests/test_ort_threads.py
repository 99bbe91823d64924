"""The CPU kernels under ONNX Runtime size their work for the session's intra-op thread count.

ORT's C API does not tell a custom op intra_op_num_threads, so ``fusedops.ort.session()`` passes it as session config
``fusedops.intra_op_num_threads`` (read when the library is registered). At one thread the kernels hand no batch to
ORT's pool (the GEMM is one call, not row tiles that each repack W); at two they do. Without the entry they split
for the hardware's threads and use the pool even at one ORT thread, so the counter checks below fail. Results at 1
and 2 threads match each other and the float64 reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fusedops import catalog
from native_support import built_ort
from test_ort_lib import fused_graph

ort = pytest.importorskip("onnxruntime")
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def fo():
    return built_ort()


def _session(fo, model, threads: int):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return fo.session(model, providers=CPU, sess_options=so), so


def _gemm_case():
    # 1024 rows x 512 channels: at two threads the GEMM is two row tiles (one batch on the pool), at one a single call.
    attrs = {"num_groups": 32, "epsilon": 1e-5, "post": "silu", "trans_b": 1, "allow_tf32": 1}
    a = catalog.parse_attrs("GemmGroupNormAct", attrs)
    gen = torch.Generator().manual_seed(10)
    x = torch.rand(1024, 512, generator=gen, dtype=torch.float64) * 2 - 0.5
    w = torch.randn(512, 512, generator=gen, dtype=torch.float64) / 512 ** 0.5
    b, gamma, beta = (torch.randn(512, generator=gen, dtype=torch.float64) for _ in range(3))
    ref = catalog.gemm_group_norm_act_reference(x, w, b, gamma + 1, beta, [], a).numpy()
    feeds = {"X": x, "W": w, "B": b, "gamma": gamma + 1, "beta": beta}
    return fused_graph("GemmGroupNormAct", attrs, 0), {k: v.float().numpy() for k, v in feeds.items()}, ref


def _groupnorm_case():
    # General path (S = 1024): one task per (sample, group), 32 of them.
    attrs = {"num_groups": 8, "epsilon": 1e-5, "post": "silu"}
    a = catalog.parse_attrs("GroupNormAct", attrs)
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(4, 64, 32, 32, generator=gen, dtype=torch.float64)
    gamma, beta = torch.randn(64, generator=gen, dtype=torch.float64) + 1, torch.randn(64, generator=gen,
                                                                                     dtype=torch.float64)
    ref = catalog.group_norm_act_reference(x, gamma, beta, [], a).numpy()
    feeds = {"X": x, "gamma": gamma, "beta": beta}
    return fused_graph("GroupNormAct", attrs, 0), {k: v.float().numpy() for k, v in feeds.items()}, ref


@pytest.mark.parametrize("make", [_gemm_case, _groupnorm_case], ids=["gemm", "groupnorm"])
def test_one_ort_thread_means_no_pool_batches(fo, make):
    model, feeds, ref = make()
    ys, batches = {}, {}
    for threads in (1, 2):
        sess, so = _session(fo, model, threads)
        assert so.get_session_config_entry("fusedops.intra_op_num_threads") == str(threads)
        before, calls = fo.parallel_for_calls(), fo.kernel_calls("cpu")
        (ys[threads],) = fo.run(sess, feeds)
        assert fo.kernel_calls("cpu") == calls + 1
        batches[threads] = fo.parallel_for_calls() - before
    assert batches[1] == 0, "at one intra-op thread the kernels still split their work for ORT's pool"
    assert batches[2] >= 1, "at two intra-op threads the kernels ran everything on one thread"
    np.testing.assert_allclose(ys[1], ys[2], rtol=1e-5, atol=1e-5)
    for y in ys.values():
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_callers_entry_is_kept_and_default_threads_set_none(fo):
    model = fused_graph("GroupNormAct", {"num_groups": 2}, 0)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("fusedops.intra_op_num_threads", "2")
    fo.session(model, providers=CPU, sess_options=so)
    assert so.get_session_config_entry("fusedops.intra_op_num_threads") == "2"
    so = ort.SessionOptions()  # intra_op_num_threads 0: ORT picks, the kernels use the hardware's count
    fo.session(model, providers=CPU, sess_options=so)
    with pytest.raises(Exception):
        so.get_session_config_entry("fusedops.intra_op_num_threads")


@pytest.mark.parametrize("value", ["two", "-1", "", "1x", "100000"])
def test_bad_thread_count_fails_at_registration(fo, value):
    so = ort.SessionOptions()
    so.add_session_config_entry("fusedops.intra_op_num_threads", value)
    with pytest.raises(Exception, match=f"fusedops.intra_op_num_threads must be a thread count .*got '{value}'"):
        so.register_custom_ops_library(str(fo.library_path()))
