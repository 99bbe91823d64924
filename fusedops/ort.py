"""ONNX Runtime with the fusedops custom-op library (``libfusedops_ort.so``, domain ``fusedops``).

    library_path() -> Path                                   the built library (FusedopsError if missing)
    unavailable_reason(provider) -> str | None               why the library cannot serve that EP here
    build_library(cuda="auto") -> Path                       build it (scripts/get_native_deps.sh + CMake)
    session(model, providers=None, allow_tf32=True, sess_options=None) -> onnxruntime.InferenceSession
    run(session, inputs) -> list[np.ndarray]
    kernel_calls(provider=None) -> int                       debug counter: how often the library's kernels ran
    parallel_for_calls() -> int                              debug counter: the CPU kernels' batches on ORT's pool
    cpu_blas() -> str                                        the BLAS behind the library's CPU GEMM

``session`` registers the library on the SessionOptions (once per options object) and picks the CUDA EP first when
onnxruntime offers it. ``allow_tf32=False`` sets the session config entry ``fusedops.allow_tf32`` = "0" (read by the
library when it is registered; it overrides every node's ``allow_tf32`` attribute: strict FP32 GEMMs on the CUDA EP);
``allow_tf32=True`` leaves each node's attribute in charge (the catalog default 1 = TF32). An entry the caller already
put on ``sess_options`` is kept. The CPU GEMM's BLAS: session config ``fusedops.cpu_blas`` (a library path or "eigen",
read at registration) is set to ``plugins.cpu_blas.default_choice()`` (``$FUSEDOPS_CPU_BLAS``, else the
scipy-openblas32 wheel's OpenBLAS) unless the caller set it; ``cpu_blas()`` says what the library uses. Threads:
ORT's C API does not tell a custom op its intra-op thread count, so session config ``fusedops.intra_op_num_threads``
(read at registration) is set to ``sess_options.intra_op_num_threads`` when that is > 0 and the caller did not set
it: the CPU kernels size their work split for it (at 1 thread the GEMM is one call; without the entry they split for
the hardware's threads). ``parallel_for_calls()`` counts the kernels' batches on ORT's pool.
"""

from __future__ import annotations

import ctypes
import subprocess
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import FusedopsError
from .plugins import cpu_blas as _cpu_blas
from .plugins import native

LIBRARY_NAME = "fusedops_ort"
CONFIG_ALLOW_TF32 = "fusedops.allow_tf32"
CONFIG_CPU_BLAS = "fusedops.cpu_blas"
CONFIG_INTRA_OP_THREADS = "fusedops.intra_op_num_threads"
_CONFIG_REGISTERED = "fusedops.library_registered"
_REPO_ROOT = Path(__file__).resolve().parent.parent
_lock = threading.Lock()
_counter_lib: ctypes.CDLL | None = None


def library_path() -> Path:
    """Path of ``libfusedops_ort.so``; FusedopsError naming how to build it when it is missing."""
    path = native.library_path(LIBRARY_NAME)
    if path is None:
        raise FusedopsError(native.missing_library(
            "libfusedops_ort.so", "build it with fusedops.ort.build_library() (needs cmake, a C++17 compiler and "
            "the headers from scripts/get_native_deps.sh)"))
    return path


def unavailable_reason(provider: str = "CPUExecutionProvider") -> str | None:
    """Why the library cannot serve ``provider`` here (not built / built without CUDA), or None if it can."""
    try:
        library_path()
    except FusedopsError as e:
        return str(e)
    if provider == "CUDAExecutionProvider" and not library_has_cuda():
        return "libfusedops_ort.so was built without CUDA (rebuild with FUSEDOPS_CUDA=ON where nvcc + cuBLASLt exist)"
    return None


def build_library(cuda: str = "auto", fetch_deps: bool = True) -> Path:
    """Fetch the header-only deps (unless present) and build ``fusedops_ort`` with CMake; returns its path."""
    if fetch_deps and native.source_checkout():  # an installed package: native.build says why it cannot build
        script = _REPO_ROOT / "scripts" / "get_native_deps.sh"
        proc = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise FusedopsError(f"scripts/get_native_deps.sh failed: {proc.stdout.strip().splitlines()[-3:]}")
    native.build(cuda=cuda, targets=[LIBRARY_NAME])
    return library_path()


def _ort():
    try:
        import onnxruntime as ort  # lazy: its absence is reported in one line; fusedops.ort stays light
    except ImportError as e:  # pragma: no cover - onnxruntime is a dependency
        raise FusedopsError(f"onnxruntime is not installed: {e}") from None
    return ort


def _config_entry(so, key: str) -> str | None:
    try:
        return so.get_session_config_entry(key)
    except Exception:  # onnxruntime raises when the key is absent
        return None


def available_providers() -> list[str]:
    return list(_ort().get_available_providers())


def session(model: Any, providers: Sequence[str] | None = None, allow_tf32: bool = True,
            sess_options: Any = None, provider_options: Sequence[dict] | None = None):
    """An InferenceSession for ``model`` (path or ModelProto) with the fusedops library registered.

    providers: default CUDA EP first when available, then CPU. ``allow_tf32=False`` makes the float32 GEMMs of the
    fused nodes strict FP32 on the CUDA EP (session config ``fusedops.allow_tf32`` = "0", which wins over the node
    attribute); True leaves the node attributes (or a ``fusedops.allow_tf32`` entry the caller set) in charge. An
    existing ``sess_options`` gets the library registered once (not again on later calls with the same object).
    """
    ort = _ort()
    lib = library_path()
    so = sess_options if sess_options is not None else ort.SessionOptions()
    # The library reads the config entry when it is registered, so set it first. One registration per options
    # object (a second would add the domain twice); a config entry marks it with the requested precision, since the
    # pybind SessionOptions takes no Python attributes.
    want = "tf32-allowed" if allow_tf32 else "strict-fp32"
    registered = _config_entry(so, _CONFIG_REGISTERED)
    if registered is None:
        if not allow_tf32 and _config_entry(so, CONFIG_ALLOW_TF32) != "0":
            so.add_session_config_entry(CONFIG_ALLOW_TF32, "0")
        blas = _cpu_blas.default_choice()
        if blas and _config_entry(so, CONFIG_CPU_BLAS) is None:
            so.add_session_config_entry(CONFIG_CPU_BLAS, blas)
        if so.intra_op_num_threads > 0 and _config_entry(so, CONFIG_INTRA_OP_THREADS) is None:
            so.add_session_config_entry(CONFIG_INTRA_OP_THREADS, str(so.intra_op_num_threads))
        # ORT unloads a custom-op library with the last session that holds it; our handle keeps it loaded, so the
        # counters and the BLAS choice still describe this process's runs after the sessions are gone.
        _counters()
        so.register_custom_ops_library(str(lib))
        so.add_session_config_entry(_CONFIG_REGISTERED, want)
    elif registered != want:
        raise FusedopsError(f"these SessionOptions already carry the fusedops library registered with {registered}; "
                            f"use a new SessionOptions for allow_tf32={allow_tf32}")
    if providers is None:
        avail = ort.get_available_providers()
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in avail]
    if "CUDAExecutionProvider" in providers:
        import torch  # noqa: F401  # lazy: only for the CUDA EP, which dlopens the CUDA / cuDNN libraries torch loads
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif isinstance(model, (str, Path)):
        if not Path(model).is_file():
            raise FusedopsError(f"ONNX model {str(model)!r} not found")
        model = str(model)
    try:
        kw = {"providers": list(providers)}
        if provider_options is not None:
            kw["provider_options"] = list(provider_options)
        return ort.InferenceSession(model, sess_options=so, **kw)
    except Exception as e:  # onnxruntime raises its own exception types; keep the message (it names the node)
        raise FusedopsError(f"onnxruntime could not create the session: {e}") from e


def run(sess, inputs: Mapping[str, Any]) -> list[np.ndarray]:
    """Run with numpy (or CPU torch) inputs; returns the outputs as numpy arrays."""
    feeds = {}
    for k, v in inputs.items():
        if hasattr(v, "detach"):
            v = v.detach().cpu().numpy()
        feeds[k] = v
    names = {i.name for i in sess.get_inputs()}
    unknown = set(feeds) - names
    if unknown:
        raise FusedopsError(f"unknown input(s) {sorted(unknown)}; the model takes {sorted(names)}")
    return sess.run(None, feeds)


def _counters() -> ctypes.CDLL:
    """The library as loaded by ORT (dlopen returns the same handle, so the counters are the ones ORT bumps). Held for
    the process's lifetime: ``session`` takes it before registering, so ORT's unload after its last session keeps it."""
    global _counter_lib
    with _lock:
        if _counter_lib is None:
            lib = ctypes.CDLL(str(library_path()))
            for fn in ("fusedops_ort_kernel_calls", "fusedops_ort_cpu_kernel_calls", "fusedops_ort_cuda_kernel_calls",
                       "fusedops_ort_parallel_for_calls", "fusedops_ort_prepared_weight_runs"):
                getattr(lib, fn).restype = ctypes.c_int64
                getattr(lib, fn).argtypes = []
            lib.fusedops_ort_has_cuda.restype = ctypes.c_int
            lib.fusedops_ort_cpu_blas.restype = ctypes.c_char_p
            lib.fusedops_ort_cpu_blas.argtypes = []
            _counter_lib = lib
    return _counter_lib


def kernel_calls(provider: str | None = None) -> int:
    """How many times the library's kernels ran in this process (all, "cpu" or "cuda")."""
    lib = _counters()
    if provider is None:
        return int(lib.fusedops_ort_kernel_calls())
    if provider.lower().startswith("cpu"):
        return int(lib.fusedops_ort_cpu_kernel_calls())
    if provider.lower().startswith("cuda"):
        return int(lib.fusedops_ort_cuda_kernel_calls())
    raise FusedopsError(f"provider must be 'cpu' or 'cuda', got {provider!r}")


def prepared_weight_runs() -> int:
    """How many CUDA runs read a node's W split once (a constant W on the 3xTF32 kernel) in this process."""
    return int(_counters().fusedops_ort_prepared_weight_runs())


def parallel_for_calls() -> int:
    """How many times the library's CPU kernels handed a batch of tasks to ORT's intra-op pool in this process."""
    return int(_counters().fusedops_ort_parallel_for_calls())


def cpu_blas() -> str:
    """What the ORT library's CPU GEMM uses (its own copy of the kernels), e.g. "OpenBLAS (...) from PATH"."""
    return _counters().fusedops_ort_cpu_blas().decode(errors="replace")


def library_has_cuda() -> bool:
    return bool(_counters().fusedops_ort_has_cuda())
