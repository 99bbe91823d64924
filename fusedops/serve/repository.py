"""`fusedops repo`: a Triton model repository for an existing ``tritonserver``.

    OUT/<name>/config.pbtxt           Triton's ModelConfig in protobuf text format
    OUT/<name>/1/model.onnx|model.plan
    OUT/<name>/libfusedops_ort.so     (ONNX) loaded by the onnxruntime backend: model_operations.op_library_filename
    OUT/<name>/libfusedops_trt.so     (engine) loaded by the tensorrt backend: --backend-config=tensorrt,plugins=...
    OUT/fusedops_repo.json            what was written and the tritonserver command line

config.pbtxt is built as a ``ModelConfig`` message of Triton's own schema (``model_config_pb2``, shipped by
tritonclient) and written with protobuf's text format, so every field name and enum value is one Triton parses.
Libraries sit inside the model's folder (Triton treats every folder at the repository's top level as a model), and
their paths in the config are where tritonserver will see them (``server_path``, e.g. /models in a container).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fusedops import ort as fo_ort
from fusedops.errors import FusedopsError
from fusedops.plugins import native

from .backends import ENGINE_SUFFIXES, TensorSpec, is_batched, onnx_specs

ORT_LIBRARY = "libfusedops_ort.so"
TRT_LIBRARY = "libfusedops_trt.so"
_V2_TYPES = {np.dtype(np.float32): "TYPE_FP32", np.dtype(np.float16): "TYPE_FP16", np.dtype(np.float64): "TYPE_FP64",
             np.dtype(np.int32): "TYPE_INT32", np.dtype(np.int64): "TYPE_INT64"}


# The dynamic batcher's delay: 0 measured better than 100 us at every concurrency in one run (H200, 2026-11-24,
# model 1 bench size, ort-cuda: c = 1 p50 1.072 vs 1.269 ms, c = 64 9191 vs 6884 inf/s); Triton still batches
# what queues while the model runs.
DEFAULT_MAX_QUEUE_DELAY_US = 0


@dataclass
class RepoOptions:
    source: str  # fused .onnx, or a TensorRT engine (.plan / .engine)
    out: str
    model_name: str = "fusedops"
    onnx: str | None = None  # an engine's ONNX (tensor names, types, shapes)
    max_batch_size: int = 64
    max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US
    instances: int | None = 1  # None: the writer's default (native_repo: 2 sessions on the CUDA EP)
    kind: str = "auto"  # auto | gpu | cpu
    server_path: str | None = None
    force: bool = False


@dataclass
class RepoResult:
    model_dir: Path
    config_path: Path
    library_path: Path  # the copy inside the repository
    command: str
    batched: bool
    notes: list[str] = field(default_factory=list)


def model_config_pb2():
    try:
        from tritonclient.grpc import model_config_pb2 as pb  # lazy: optional (serve extra); absence reported
    except ImportError as e:
        raise FusedopsError(f"tritonclient is not installed ({e}); it ships Triton's model-config schema: "
                            f"pip install -e '.[serve]'") from None
    return pb


def build_config(name: str, platform: str, inputs: list[TensorSpec], outputs: list[TensorSpec], o: RepoOptions,
                 kind: str, op_library: str | None):
    """The ModelConfig message: batched models drop dim 0 from dims and get max_batch_size + dynamic_batching."""
    pb = model_config_pb2()
    batched = is_batched(inputs, outputs)
    cfg = pb.ModelConfig(name=name, platform=platform, max_batch_size=o.max_batch_size if batched else 0)
    for specs, add in ((inputs, cfg.input.add), (outputs, cfg.output.add)):
        for t in specs:
            if t.dtype not in _V2_TYPES:
                raise FusedopsError(f"tensor {t.name!r} has type {t.dtype}, which this writer does not map")
            entry = add()
            entry.name = t.name
            entry.data_type = pb.DataType.Value(_V2_TYPES[t.dtype])
            entry.dims.extend(t.shape[1:] if batched else t.shape)
    if batched:
        cfg.dynamic_batching.max_queue_delay_microseconds = o.max_queue_delay_us
    group = cfg.instance_group.add()
    group.count = o.instances
    group.kind = pb.ModelInstanceGroup.Kind.Value("KIND_GPU" if kind == "gpu" else "KIND_CPU")
    if op_library:
        cfg.model_operations.op_library_filename.append(op_library)
    return cfg, batched


def config_text(cfg) -> str:
    from google.protobuf import text_format  # lazy: protobuf; cli/repo.py imports this module

    return text_format.MessageToString(cfg)


def parse_config(text: str):
    """config.pbtxt text → ModelConfig; FusedopsError naming the problem if it is not valid for Triton's schema."""
    from google.protobuf import text_format  # lazy: protobuf; cli/repo.py imports this module

    pb = model_config_pb2()
    try:
        return text_format.Parse(text, pb.ModelConfig())
    except text_format.ParseError as e:
        raise FusedopsError(f"config.pbtxt does not parse against Triton's ModelConfig: {e}") from None


UNBATCHED_NOTE = ("served unbatched (max_batch_size 0, no dynamic batching): an input or output does not keep the "
                  "batch in dim 0")


def repository_folder(o: RepoOptions) -> Path:
    """The repository folder ``o`` names, after the checks every repository writer shares (model name, counts,
    --out not a file)."""
    if not o.model_name or not all(c.isalnum() or c in "._-" for c in o.model_name):
        raise FusedopsError(f"model name {o.model_name!r} may hold only letters, digits, '.', '_' and '-'")
    if o.max_batch_size < 1 or o.instances < 1 or o.max_queue_delay_us < 0:
        raise FusedopsError("--max-batch-size and --instances must be >= 1, --max-queue-delay-us >= 0")
    out = Path(o.out).expanduser()
    if out.exists() and not out.is_dir():
        raise FusedopsError(f"--out {str(out)!r} exists and is not a folder")
    return out


def record_repository(o: RepoOptions, out: Path, what: dict, batched: bool, notes: list[str]) -> str:
    """OUT/fusedops_repo.json: ``what`` was written (backend, runtime, ...), batched, notes and the tritonserver
    command line, which is returned."""
    command = f"tritonserver --model-repository={(o.server_path or str(out.resolve())).rstrip('/')}"
    (out / "fusedops_repo.json").write_text(json.dumps(
        {"model": o.model_name, **what, "source": str(o.source), "batched": batched, "command": command,
         "notes": notes}, indent=1))
    return command


def _check(o: RepoOptions) -> str:
    src = Path(o.source)
    if not src.is_file():
        raise FusedopsError(f"{o.source!r} not found")
    suffix = src.suffix.lower()
    if suffix not in (".onnx", *ENGINE_SUFFIXES):
        raise FusedopsError(f"{o.source!r} is neither an .onnx file nor a TensorRT engine (.plan / .engine)")
    repository_folder(o)
    if o.kind not in ("auto", "gpu", "cpu"):
        raise FusedopsError(f"kind must be auto, gpu or cpu, got {o.kind!r}")
    return "onnx" if suffix == ".onnx" else "engine"


def _engine_max_batch(engine: Path) -> int | None:
    """Largest batch of the engine's optimisation profile, from the metadata `fusedops build` writes beside it."""
    meta = engine.with_name(engine.name + ".json")
    try:
        profile = json.loads(meta.read_text()).get("profile") or {}
        return min(int(mx[0]) for _mn, _opt, mx in profile.values())
    except (OSError, ValueError, TypeError, IndexError):
        return None


def write_repository(o: RepoOptions) -> RepoResult:
    kind_of_source = _check(o)
    out = Path(o.out).expanduser()
    if out.exists() and not out.is_dir():
        raise FusedopsError(f"--out {str(out)!r} exists and is not a folder")
    model_dir = out / o.model_name
    if model_dir.exists() and not o.force:
        raise FusedopsError(f"model folder {str(model_dir)!r} exists; pass --force to replace it")
    server_root = (o.server_path or str(out.resolve())).rstrip("/")
    notes: list[str] = []

    if kind_of_source == "onnx":
        library = fo_ort.library_path()
        inputs, outputs = onnx_specs(o.source)
        has_cuda = fo_ort.library_has_cuda()
        kind = ("gpu" if has_cuda else "cpu") if o.kind == "auto" else o.kind
        if kind == "gpu" and not has_cuda:
            notes.append(f"{ORT_LIBRARY} here was built without CUDA: KIND_GPU instances need a CUDA build "
                         f"(fusedops build-native --cuda on)")
        platform, model_file, lib_name = "onnxruntime_onnx", "model.onnx", ORT_LIBRARY
        op_library = f"{server_root}/{o.model_name}/{ORT_LIBRARY}"
    else:
        if o.onnx is None:
            raise FusedopsError("an engine's tensor names and shapes come from the ONNX it was built from: pass --onnx")
        if not Path(o.onnx).is_file():
            raise FusedopsError(f"--onnx {o.onnx!r} not found")
        library = native.library_path("fusedops_trt")
        if library is None:
            raise FusedopsError(f"{TRT_LIBRARY} not built (fusedops build-native on a machine with CUDA and the "
                                f"TensorRT headers)")
        inputs, outputs = onnx_specs(o.onnx)
        kind = "gpu" if o.kind == "auto" else o.kind
        if kind != "gpu":
            raise FusedopsError("a TensorRT engine runs on the GPU only (--kind gpu or auto)")
        engine_max = _engine_max_batch(Path(o.source))
        if engine_max is not None and engine_max < o.max_batch_size:
            notes.append(f"max_batch_size lowered from {o.max_batch_size} to the engine profile's {engine_max}")
            o = RepoOptions(**{**o.__dict__, "max_batch_size": engine_max})
        platform, model_file, lib_name, op_library = "tensorrt_plan", "model.plan", TRT_LIBRARY, None

    cfg, batched = build_config(o.model_name, platform, inputs, outputs, o, kind, op_library)
    if not batched:
        notes.append("served unbatched (max_batch_size 0, no dynamic batching): an input or output does not keep "
                     "the batch in dim 0")
    text = config_text(cfg)
    parse_config(text)  # the text round-trips through the schema before anything is written

    if model_dir.exists():
        shutil.rmtree(model_dir)
    (model_dir / "1").mkdir(parents=True)
    shutil.copyfile(o.source, model_dir / "1" / model_file)
    shutil.copy2(library, model_dir / lib_name)
    config_path = model_dir / "config.pbtxt"
    config_path.write_text(text)

    if platform == "tensorrt_plan":
        command = (f"tritonserver --model-repository={server_root} "
                   f"--backend-config=tensorrt,plugins={server_root}/{o.model_name}/{TRT_LIBRARY}")
    else:
        command = f"tritonserver --model-repository={server_root}"
    (out / "fusedops_repo.json").write_text(json.dumps(
        {"model": o.model_name, "platform": platform, "source": str(o.source), "library": lib_name,
         "batched": batched, "command": command, "notes": notes}, indent=1))
    return RepoResult(model_dir, config_path, model_dir / lib_name, command, batched, notes)
