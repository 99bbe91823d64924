"""A Triton model repository served by fusedops' native backend (``backend: "fusedops"``, libtriton_fusedops.so from
plugins/triton): ONNX Runtime + libfusedops_ort.so inside tritonserver's own process, no Python stub.

    OUT/<name>/config.pbtxt          ModelConfig: backend "fusedops", real tensor names, batching, instance group
    OUT/<name>/fusedops_backend.cfg  what the backend loads: ONNX Runtime (the installed onnxruntime package's own
                                     libonnxruntime), libfusedops_ort.so, the model, the EP (plugins/triton/
                                     backend_config.h)
    OUT/<name>/1/model.onnx          the fused ONNX (copied; or named by its absolute path)

Why: the Python backend's stub costs ≈ 110 µs of work a request (H200, docs/serving.md), which caps throughput under
load whatever the model costs; here a dynamic batch is one gather, one ONNX Runtime run and one scatter.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from fusedops import ort as fo_ort
from fusedops.errors import FusedopsError
from fusedops.plugins import cpu_blas, native

from .backends import TensorSpec, onnx_specs
from .repository import (UNBATCHED_NOTE, RepoOptions, RepoResult, build_config, config_text, parse_config,
                         record_repository, repository_folder)

BACKEND_NAME = "fusedops"
BACKEND_LIBRARY = "triton_fusedops"  # libtriton_fusedops.so, as Triton names a backend's library
CONFIG_FILE = "fusedops_backend.cfg"
# Native sessions on the CUDA EP by default: two overlap one batch's host copies with the other's run (H200,
# 2026-11-27, model 1 bench size, c = 64: 16.4k inf/s with one, 21.5-21.8k with two; c = 1 unchanged, 0.885-0.905 ms).
NATIVE_CUDA_INSTANCES = 2
ONNX_FILE = "model.onnx"


def default_instances(runtime: str) -> int:
    """Sessions a native model gets unless told: NATIVE_CUDA_INSTANCES on the CUDA EP, 1 on the CPU (CPU sessions
    share the cores through ORT's intra-op threads)."""
    return NATIVE_CUDA_INSTANCES if runtime == "ort-cuda" else 1


def backend_built() -> bool:
    return native.library_path(BACKEND_LIBRARY) is not None


def backend_library() -> Path:
    """libtriton_fusedops.so of this build; FusedopsError saying how to build it."""
    path = native.library_path(BACKEND_LIBRARY)
    if path is None:
        raise FusedopsError("the native Triton backend (libtriton_fusedops.so) is not built: run `fusedops "
                            "build-native` with the ONNX Runtime headers present (scripts/get_native_deps.sh)")
    return path


def onnxruntime_library() -> Path:
    """The installed onnxruntime package's libonnxruntime (the backend dlopens the ORT fusedops.ort uses)."""
    try:
        import onnxruntime  # lazy: its absence is reported in one line
    except ImportError as e:
        raise FusedopsError(f"onnxruntime is not installed: {e}") from None
    found = sorted((Path(onnxruntime.__file__).parent / "capi").glob("libonnxruntime.so*"))
    if not found:
        raise FusedopsError(f"onnxruntime {onnxruntime.__version__} ships no libonnxruntime.so in its capi folder "
                            f"(the native backend needs ONNX Runtime 1.21 or later as a shared library)")
    return found[-1].resolve()


def _check_line_value(key: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        raise FusedopsError(f"{CONFIG_FILE}: the value of {key} holds a line break: {value!r}")
    return value


def write_native_model(out: Path, model_name: str, source: str, runtime: str, inputs: list[TensorSpec],
                       outputs: list[TensorSpec], *, max_batch_size: int = 64, max_queue_delay_us: int = 0,
                       instances: int = 1, intra_op_threads: int = 0, copy_source: bool = True,
                       carry_libraries: bool = False, force: bool = False) -> tuple[Path, bool]:
    """Write OUT/<model_name> for the fused ONNX ``source`` on ``runtime`` (ort-cpu: KIND_CPU instances on the CPU
    EP; ort-cuda: KIND_GPU instances, the CUDA EP on each instance's GPU). ``carry_libraries``: copy the backend,
    libfusedops_ort.so and ONNX Runtime's libraries into the model folder and name them relative to it (a
    repository for another tritonserver, which finds a backend's library in the model folder); else name this
    machine's copies. Returns (model folder, batched)."""
    if runtime not in ("ort-cpu", "ort-cuda"):
        raise FusedopsError(f"the native backend serves ort-cpu or ort-cuda, not {runtime!r} (PyTorch backends: "
                            f"--server tritonserver)")
    if not source.lower().endswith(".onnx") or not Path(source).is_file():
        raise FusedopsError(f"the native backend serves a fused .onnx file; {source!r} is not one")
    op_library = fo_ort.library_path()
    if runtime == "ort-cuda" and not fo_ort.library_has_cuda():
        raise FusedopsError("ort-cuda needs libfusedops_ort.so built with CUDA (fusedops build-native --cuda on)")
    model_dir = Path(out) / model_name
    if model_dir.exists() and not force:
        raise FusedopsError(f"model folder {str(model_dir)!r} exists; pass --force to replace it")
    options = RepoOptions(source=source, out=str(out), model_name=model_name, max_batch_size=max_batch_size,
                          max_queue_delay_us=max_queue_delay_us, instances=instances)
    cfg, batched = build_config(model_name, "", inputs, outputs, options, "gpu" if runtime == "ort-cuda" else "cpu",
                                None)
    cfg.backend = BACKEND_NAME
    text = config_text(cfg)
    parse_config(text)  # round-trips through Triton's schema before anything is written
    ort_library = onnxruntime_library()
    carried = {}  # file in the model folder -> its source here
    if carry_libraries:
        carried[backend_library().name] = backend_library()
        carried[op_library.name] = op_library
        ort_dir = ort_library.parent  # libonnxruntime finds its provider libraries beside itself ($ORIGIN)
        for lib in [ort_library, *sorted(ort_dir.glob("libonnxruntime_providers_*.so"))]:
            carried[f"onnxruntime/{lib.name}"] = lib
    settings = {"onnxruntime_library": f"onnxruntime/{ort_library.name}" if carry_libraries else str(ort_library),
                "op_library": op_library.name if carry_libraries else str(op_library),
                "model": f"1/{ONNX_FILE}" if copy_source else str(Path(source).resolve()),
                "provider": "cuda" if runtime == "ort-cuda" else "cpu", "batched": str(int(batched)),
                "intra_op_threads": str(intra_op_threads),
                # Triton bounds a batched model's dim 0 by max_batch_size; an unbatched one's the backend bounds
                "max_rows": "0" if batched else str(max_batch_size)}
    blas = cpu_blas.default_choice()
    if blas:
        settings[f"config.{fo_ort.CONFIG_CPU_BLAS}"] = blas
    if intra_op_threads > 0:
        settings[f"config.{fo_ort.CONFIG_INTRA_OP_THREADS}"] = str(intra_op_threads)
    lines = [f"{key}={_check_line_value(key, value)}" for key, value in settings.items()]

    if model_dir.exists():
        shutil.rmtree(model_dir)
    (model_dir / "1").mkdir(parents=True)
    if copy_source:
        shutil.copyfile(source, model_dir / "1" / ONNX_FILE)
    for name, lib in carried.items():
        (model_dir / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib, model_dir / name)
    (model_dir / "config.pbtxt").write_text(text)
    (model_dir / CONFIG_FILE).write_text("# fusedops native Triton backend (plugins/triton/backend_config.h)\n" +
                                         "\n".join(lines) + "\n")
    return model_dir, batched


def write_native_repository(o: RepoOptions, runtime: str = "auto") -> RepoResult:
    """`fusedops repo SOURCE.onnx --backend native`: a repository for your own tritonserver (backend API 1.19 or
    later, this machine's glibc or newer) that carries what it runs: libtriton_fusedops.so (Triton loads a backend's
    library from the model folder before its backend directory), libfusedops_ort.so and this onnxruntime package's
    libraries (the CPU build ≈ 30 MB; onnxruntime-gpu's CUDA provider is far larger)."""
    if runtime == "auto":
        runtime = "ort-cuda" if fo_ort.library_has_cuda() else "ort-cpu"
    if o.instances is None:  # as `fusedops serve --server native` defaults
        o = dataclasses.replace(o, instances=default_instances(runtime))
    out = repository_folder(o)
    inputs, outputs = onnx_specs(o.source)
    model_dir, batched = write_native_model(out, o.model_name, o.source, runtime, inputs, outputs,
                                            max_batch_size=o.max_batch_size, max_queue_delay_us=o.max_queue_delay_us,
                                            instances=o.instances, carry_libraries=True, force=o.force)
    notes = [f"the model runs {runtime} in fusedops' native backend, whose library the model folder carries"]
    notes += [] if batched else [UNBATCHED_NOTE]
    command = record_repository(o, out, {"backend": BACKEND_NAME, "runtime": runtime}, batched, notes)
    return RepoResult(model_dir, model_dir / "config.pbtxt", model_dir / backend_library().name, command, batched,
                      notes)
