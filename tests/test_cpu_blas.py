"""The CPU GEMM's run-time BLAS (plugins/csrc/core/cpu_blas.cpp): OpenBLAS and the Eigen fallback both match the
float64 reference on odd, tiled shapes in float32 / float16 / bfloat16 with W either way round, through the C ABI
(the library's own pool) and through ONNX Runtime at 1 and 2 intra-op threads; a bad library is one clear error
naming the path; the choice is visible (fusedops_cpu_blas / fusedops.ort.cpu_blas).

"blas" is the scipy-openblas32 wheel's OpenBLAS (extra cpu-blas, installed by scripts/dev.sh); where that package is
missing those cases skip and say so.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib

import numpy as np
import onnxruntime as ort
import pytest
import torch

from fusedops import catalog
from fusedops.errors import FusedopsError
from fusedops.plugins import cpu_blas
from test_ort_lib import fused_graph  # the ORT tests' graph builder: fused node between Casts to its dtypes
from native_support import built_abi, built_ort

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}  # as tests/test_core_native.py's GEMM test


@pytest.fixture(scope="module")
def abi():
    abi_mod = built_abi("the native libraries")
    yield abi_mod
    abi_mod.set_cpu_blas(cpu_blas.default_choice())  # leave the process as loading the library leaves it


@pytest.fixture(scope="module")
def fo():
    return built_ort("the native libraries")


def _choice(backend: str) -> str:
    if backend == "eigen":
        return "eigen"
    path = cpu_blas.scipy_openblas_library()
    if path is None:
        pytest.skip("scipy-openblas32 is not installed (extra cpu-blas; scripts/dev.sh installs it)")
    return path


# M, K, C, groups, pre, post, reduce, trans_b: sizes that are multiples of nothing, above the one-task size
# (M·C·K >= 2^18), so the GEMM runs in 2-D tiles with ragged edges on the pool.
ODD_CASES = [
    (1037, 301, 246, 3, "", "silu", "", 1),
    (515, 129, 390, 13, "relu", "gelu", "", 0),
    (2, 700, 1001, 7, "", "", "mean", 1),     # two rows: column tiles only
    (3001, 67, 11, 11, "mul(@0)", "tanh", "", 0),  # one channel per group, many row tiles
    (77, 1500, 97, 1, "", "silu", "logsumexp", 1),
]


def _inputs(case, dtype):
    M, K, C, G, pre, post, reduce, trans_b = case
    gen = torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": G, "pre": pre, "post": post, "reduce": reduce,
                                                 "trans_b": trans_b})
    x = (torch.rand(M, K, generator=gen, dtype=torch.float64) * 2 - 0.5).to(dtype)
    w = (torch.randn(*((C, K) if trans_b else (K, C)), generator=gen, dtype=torch.float64) / math.sqrt(K)).to(dtype)
    b = torch.randn(C, generator=gen, dtype=torch.float64).to(dtype)
    gamma = (torch.randn(C, generator=gen, dtype=torch.float64) + 1).to(dtype)
    beta = torch.randn(C, generator=gen, dtype=torch.float64).to(dtype)
    extras = [(torch.randn(C, generator=gen, dtype=torch.float64).abs() + 0.5).to(dtype) for _ in range(a.num_extras)]
    ref = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(), beta.double(),
                                                [e.double() for e in extras], a)
    return a, (x, w, b, gamma, beta, extras), ref.to(dtype).double()


@pytest.mark.parametrize("backend", ["blas", "eigen"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", ODD_CASES, ids=lambda c: f"M{c[0]}K{c[1]}C{c[2]}-tb{c[7]}")
def test_odd_tiled_shapes_match_float64_on_each_backend(abi, backend, case, dtype):
    used = abi.set_cpu_blas(_choice(backend))
    assert used.startswith("OpenBLAS" if backend == "blas" else "Eigen"), used
    a, (x, w, b, gamma, beta, extras), ref = _inputs(case, dtype)
    out = torch.full(ref.shape, float("nan"), dtype=dtype)
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, extras, a, out=out)
    assert not torch.isnan(y).any()
    torch.testing.assert_close(y.double(), ref, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("backend", ["blas", "eigen"])
@pytest.mark.parametrize("cpg", [16, 48, 1500])  # the epilogue's per-row group statistics; > 1024: merged blocks
def test_rows_with_a_large_mean_keep_accurate_statistics(abi, backend, cpg):
    """GEMM outputs of mean ~100 and std ~1: group statistics in double keep the normalised rows at float32 accuracy."""
    abi.set_cpu_blas(_choice(backend))
    G, M, K = 4, 300, 64
    C = G * cpg
    gen = torch.Generator().manual_seed(cpg)
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": G, "post": "silu", "trans_b": 1})
    x = torch.randn(M, K, generator=gen, dtype=torch.float64).float()
    w = (torch.randn(C, K, generator=gen, dtype=torch.float64) / math.sqrt(K)).float()
    b = (100 + torch.randn(C, generator=gen, dtype=torch.float64)).float()
    gamma, beta = torch.rand(C, generator=gen) + 0.5, torch.randn(C, generator=gen)
    ref = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(), beta.double(),
                                                [], a)
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, [], a)
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["blas", "eigen"])
@pytest.mark.parametrize("M,trans_b", [(3, 1), (5000, 0)])  # one task / tiled
def test_k_zero_gives_the_bias_only_result(abi, backend, M, trans_b):
    """K = 0 is valid (X·W is zero): the BLAS is not called with the zero leading dimension CBLAS forbids."""
    abi.set_cpu_blas(_choice(backend))
    C, gen = 64, torch.Generator().manual_seed(M)
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": 4, "post": "silu", "trans_b": trans_b})
    x, w = torch.empty(M, 0), torch.empty((C, 0) if trans_b else (0, C))
    b, gamma, beta = torch.randn(C, generator=gen), torch.rand(C, generator=gen) + 0.5, torch.randn(C, generator=gen)
    ref = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), gamma.double(), beta.double(),
                                                [], a)
    out = torch.full((M, C), float("nan"))
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, [], a, out=out)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_backends_agree_closely(abi):
    """Same input, both GEMMs: float32 results differ only by summation order (far below the reference tolerance)."""
    a, (x, w, b, gamma, beta, extras), ref = _inputs(ODD_CASES[0], torch.float32)
    ys = {}
    for backend in ("blas", "eigen"):
        abi.set_cpu_blas(_choice(backend))
        ys[backend] = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, extras, a).double()
    assert (ys["blas"] - ys["eigen"]).abs().max().item() < 1e-4
    assert not torch.equal(ys["blas"], ref.float().double())  # not a copy of the reference: a real computation


def test_bad_paths_are_one_clear_error_and_keep_the_previous_choice(abi, tmp_path):
    before = abi.set_cpu_blas("eigen")
    missing = tmp_path / "no_such_blas.so"
    with pytest.raises(FusedopsError, match=f"cannot load CPU BLAS '{missing}'"):
        abi.set_cpu_blas(str(missing))
    not_a_library = tmp_path / "text.so"
    not_a_library.write_text("not an ELF file\n")
    with pytest.raises(FusedopsError, match=f"cannot load CPU BLAS '{not_a_library}'"):
        abi.set_cpu_blas(str(not_a_library))
    with pytest.raises(FusedopsError, match="CPU BLAS 'libm.so.6' has no cblas_sgemm"):
        abi.set_cpu_blas("libm.so.6")
    with pytest.raises(FusedopsError, match="CPU BLAS path is empty"):
        abi.set_cpu_blas("")
    assert abi.cpu_blas() == before


def test_search_without_a_choice_falls_back_to_eigen_or_a_system_blas(abi):
    """NULL reruns the library's own search: a system OpenBLAS / BLIS / MKL if one loads, else Eigen; either way
    the GEMM stays correct."""
    used = abi.set_cpu_blas(None)
    assert used.startswith(("Eigen 3 GEMM (built in); no system BLAS found", "OpenBLAS", "BLIS", "MKL", "CBLAS"))
    a, (x, w, b, gamma, beta, extras), ref = _inputs(ODD_CASES[1], torch.float32)
    y = abi.gemm_groupnorm_act_cpu(x, w, b, gamma, beta, extras, a)
    torch.testing.assert_close(y.double(), ref, rtol=TOL[torch.float32], atol=TOL[torch.float32])


def test_environment_choice_is_read_in_python(monkeypatch):
    monkeypatch.setenv(cpu_blas.ENV, "eigen")
    assert cpu_blas.default_choice() == "eigen"
    monkeypatch.delenv(cpu_blas.ENV)
    assert cpu_blas.default_choice() == cpu_blas.scipy_openblas_library()


# ---- through ONNX Runtime: the pool is ORT's intra-op pool (1 or 2 threads) ----

def _ort_session(fo, model, threads: int, choice: str):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("fusedops.cpu_blas", choice)  # read when the library is registered
    return fo.session(model, providers=["CPUExecutionProvider"], sess_options=so)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("backend", ["blas", "eigen"])
@pytest.mark.parametrize("case,dtype", [(ODD_CASES[0], torch.float32), (ODD_CASES[1], torch.float16),
                                        (ODD_CASES[3], torch.bfloat16)], ids=["f32-tb1", "f16-tb0", "bf16-tb0"])
def test_ort_cpu_ep_with_1_and_2_threads(fo, backend, threads, case, dtype):
    _, _, _, G, pre, post, reduce, trans_b = case
    a, (x, w, b, gamma, beta, extras), ref = _inputs(case, dtype)
    attrs = {"num_groups": G, "epsilon": 1e-5, "pre": pre, "post": post, "reduce": reduce, "trans_b": trans_b,
             "allow_tf32": 1}
    sess = _ort_session(fo, fused_graph("GemmGroupNormAct", attrs, a.num_extras, dtype), threads, _choice(backend))
    assert fo.cpu_blas().startswith("OpenBLAS" if backend == "blas" else "Eigen"), fo.cpu_blas()
    feeds = {"X": x, "W": w, "B": b, "gamma": gamma, "beta": beta, **{f"extra_{k}": e for k, e in enumerate(extras)}}
    before = fo.kernel_calls("cpu")
    (y,) = fo.run(sess, {k: v.float().numpy() for k, v in feeds.items()})
    assert fo.kernel_calls("cpu") == before + 1
    np.testing.assert_allclose(y, ref.numpy(), rtol=TOL[dtype], atol=TOL[dtype])


def test_ort_bad_blas_config_names_the_path(fo, tmp_path):
    so = ort.SessionOptions()
    missing = tmp_path / "libnothing.so"
    so.add_session_config_entry("fusedops.cpu_blas", str(missing))
    with pytest.raises(Exception, match=f"fusedops.cpu_blas: cannot load CPU BLAS '{missing}'"):
        so.register_custom_ops_library(str(fo.library_path()))


def test_ort_session_picks_the_wheel_blas_by_default(fo, monkeypatch):
    monkeypatch.delenv(cpu_blas.ENV, raising=False)
    if cpu_blas.scipy_openblas_library() is None:
        pytest.skip("scipy-openblas32 is not installed (extra cpu-blas; scripts/dev.sh installs it)")
    fo.session(fused_graph("GroupNormAct", {"num_groups": 2}, 0), providers=["CPUExecutionProvider"])
    assert fo.cpu_blas() == f"{fo.cpu_blas().split(' from ')[0]} from {cpu_blas.scipy_openblas_library()}"
    assert fo.cpu_blas().startswith("OpenBLAS")


def test_pytorch_cpu_op_runs_on_the_chosen_blas(abi):
    """The PyTorch ops link libfusedops.so; loading them applies the Python layer's BLAS choice to that instance, so the
    CPU op's GEMM runs on the wheel's OpenBLAS rather than the library's own search (Eigen where no system BLAS is).
    Checked in a fresh process, through a handle on the already-loaded library (RTLD_NOLOAD: no second load)."""
    wheel_blas = cpu_blas.scipy_openblas_library()
    if wheel_blas is None:
        pytest.skip("scipy-openblas32 is not installed (extra cpu-blas): nothing to choose")
    code = """
import ctypes, os, sys
import torch
from fusedops.plugins import native, torch_ops
torch_ops.load()
x, w = torch.rand(5, 48), torch.rand(32, 48)
y = torch_ops.gemm_group_norm_act(x, w, torch.rand(32), torch.rand(32), torch.rand(32), [], 4)
assert y.shape == (5, 32) and torch.isfinite(y).all()
lib = ctypes.CDLL(str(native.library_path("fusedops")), mode=os.RTLD_NOLOAD)
lib.fusedops_cpu_blas.restype = ctypes.c_char_p
print(lib.fusedops_cpu_blas().decode())
"""
    env = {k: v for k, v in os.environ.items() if k != cpu_blas.ENV}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    used = proc.stdout.strip().splitlines()[-1]
    assert used.startswith("OpenBLAS") and wheel_blas in used, used


def test_ort_counters_and_blas_outlive_the_last_session(fo):
    """ORT unloads a custom-op library with the last session holding it (seen after a GEMM run); fusedops.ort.session
    keeps it loaded, so kernel_calls() and cpu_blas() still describe the runs after the session is gone (a fresh load
    read 0 calls and its own BLAS search, "Eigen ... no system BLAS found"). A fresh process: this one holds it already."""
    code = """
import gc
import numpy as np
from fusedops import ort as fo
from test_ort_lib import fused_graph
from fusedops.plugins import cpu_blas
attrs = {"num_groups": 4, "epsilon": 1e-5, "pre": "", "post": "silu", "reduce": "", "trans_b": 1, "allow_tf32": 1}
sess = fo.session(fused_graph("GemmGroupNormAct", attrs, 0), providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
sess.run(None, {"X": rng.random((8, 16), np.float32), "W": rng.random((32, 16), np.float32),
                "B": rng.random(32, np.float32), "gamma": rng.random(32, np.float32),
                "beta": rng.random(32, np.float32)})
del sess
gc.collect()
# asked only now, after the last session: nothing but fusedops.ort.session has taken the library before
print(fo.kernel_calls("cpu"), str(cpu_blas.default_choice()) in fo.cpu_blas(), fo.cpu_blas())
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls, chosen, *_ = proc.stdout.strip().splitlines()[-1].split(" ")
    assert calls == "1", proc.stdout
    assert chosen == "True" or cpu_blas.default_choice() is None, proc.stdout  # the BLAS the session was given
