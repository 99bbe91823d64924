"""A Triton model repository whose model runs in the Python backend's stub process (``backend: "python"``).

    OUT/<name>/config.pbtxt    ModelConfig: backend "python", real tensor names, batching, and in ``parameters``
                               what the stub loads (source, fusedops backend, size, max_batch_size)
    OUT/<name>/1/model.py      fusedops/serve/triton_model.py
    OUT/<name>/1/model.onnx    the fused ONNX (an ONNX source; a model key is loaded by name)

`fusedops serve --server tritonserver` writes one into its workspace and runs the ``tritonserver`` from PyTriton's
wheel on it; `fusedops repo --backend python` writes one for a tritonserver of your own, whose Python backend must
run a Python with fusedops installed (the stub imports it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from fusedops import ort as fo_ort
from fusedops.errors import FusedopsError

from .backends import TensorSpec, onnx_specs
from .repository import (DEFAULT_MAX_QUEUE_DELAY_US, UNBATCHED_NOTE, RepoOptions, RepoResult, build_config,
                         config_text, parse_config, record_repository, repository_folder)

MODEL_FILE = Path(__file__).with_name("triton_model.py")
ONNX_FILE = "model.onnx"


def write_python_model(out: Path, model_name: str, source: str, backend: str, size: str,
                       inputs: list[TensorSpec], outputs: list[TensorSpec], *, max_batch_size: int = 64,
                       max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US, instances: int = 1,
                       kind: str = "cpu", sys_path: list[str] | None = None, copy_source: bool = True,
                       force: bool = False) -> tuple[Path, bool]:
    """Write OUT/<model_name> for ``source`` (a fused .onnx, copied in; or a model key) served by the fusedops
    ``backend`` (ort-cpu, ort-cuda, torch-cuda, torch-eager; not "auto": the writer's caller chose it). ``sys_path``:
    folders the stub puts first on its sys.path (the launching interpreter's, so the stub imports the same fusedops,
    onnxruntime and torch). ``copy_source=False`` names an ONNX source by its absolute path instead of copying it
(external data stays beside it). Returns (model folder, batched)."""
    if backend not in ("ort-cpu", "ort-cuda", "torch-cuda", "torch-eager"):
        raise FusedopsError(f"the Python-backend model serves ort-cpu, ort-cuda, torch-cuda or torch-eager, not "
                            f"{backend!r} (a TensorRT engine: `fusedops serve --server pytriton` or `fusedops repo`)")
    model_dir = Path(out) / model_name
    if model_dir.exists() and not force:
        raise FusedopsError(f"model folder {str(model_dir)!r} exists; pass --force to replace it")
    options = RepoOptions(source=source, out=str(out), model_name=model_name, max_batch_size=max_batch_size,
                          max_queue_delay_us=max_queue_delay_us, instances=instances)
    cfg, batched = build_config(model_name, "", inputs, outputs, options, kind, None)
    cfg.backend = "python"
    is_onnx = source.lower().endswith(".onnx")
    copied = is_onnx and copy_source
    # the stub resolves a relative ONNX path against the model folder (a repository that can move)
    where = f"1/{ONNX_FILE}" if copied else str(Path(source).resolve()) if is_onnx else source
    params = {"source": where, "backend": backend, "size": size, "max_batch_size": str(max_batch_size)}
    if sys_path:
        params["sys_path"] = os.pathsep.join(sys_path)
    for key, value in params.items():
        cfg.parameters[key].string_value = value
    text = config_text(cfg)
    parse_config(text)  # round-trips through Triton's schema before anything is written

    if model_dir.exists():
        shutil.rmtree(model_dir)
    (model_dir / "1").mkdir(parents=True)
    shutil.copyfile(MODEL_FILE, model_dir / "1" / "model.py")
    if copied:
        shutil.copyfile(source, model_dir / "1" / ONNX_FILE)
    (model_dir / "config.pbtxt").write_text(text)
    return model_dir, batched


def write_python_repository(o: RepoOptions, runtime: str = "auto") -> RepoResult:
    """`fusedops repo SOURCE.onnx --backend python`: the fused ONNX served by ``runtime`` (ort-cpu / ort-cuda; auto:
    ort-cuda when libfusedops_ort.so was built with CUDA) in the Python backend of your tritonserver. That server's
    Python must have fusedops (and onnxruntime) installed: the stub imports them."""
    if not o.source.lower().endswith(".onnx") or not Path(o.source).is_file():
        raise FusedopsError(f"--backend python serves a fused .onnx file; {o.source!r} is not one")
    if runtime == "auto":
        runtime = "ort-cuda" if fo_ort.library_has_cuda() else "ort-cpu"
    if runtime not in ("ort-cpu", "ort-cuda"):
        raise FusedopsError(f"--runtime must be ort-cpu or ort-cuda for an ONNX model, got {runtime!r}")
    out = repository_folder(o)
    # KIND_CPU by default, as PyTriton deploys its Python models: the stub's ONNX Runtime puts the work on GPU 0
    # itself, and a KIND_GPU Python model would only add Triton's CUDA memory pool, which host tensors do not use.
    kind = "cpu" if o.kind == "auto" else o.kind
    inputs, outputs = onnx_specs(o.source)
    model_dir, batched = write_python_model(out, o.model_name, o.source, runtime, "small", inputs, outputs,
                                            max_batch_size=o.max_batch_size,
                                            max_queue_delay_us=o.max_queue_delay_us, instances=o.instances,
                                            kind=kind, force=o.force)
    notes = [f"the model runs {runtime} in the Python backend's stub: that Python needs fusedops installed"]
    notes += [] if batched else [UNBATCHED_NOTE]
    command = record_repository(o, out, {"backend": "python", "runtime": runtime}, batched, notes)
    return RepoResult(model_dir, model_dir / "config.pbtxt", model_dir / "1" / "model.py", command, batched, notes)
