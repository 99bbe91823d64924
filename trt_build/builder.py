"""Build a TensorRT engine from a (fused) ONNX model: ``fusedops build MODEL.onnx --out OUT.plan`` (its flags are
in fusedops/cli/build.py).

The fusedops plugin library is loaded into the builder's plugin registry (``load_library``), so TensorRT's ONNX
parser maps the ``fusedops`` nodes to the GroupNormAct / GemmGroupNormAct plugins. An optimisation profile is derived
from the ONNX inputs (dynamic dim 0 = batch, ranging over min/opt/max batch; static dims kept), precision comes from
one ``--precision`` switch, and built engines are cached by everything that determines them.

Everything that does not need TensorRT (argument checks, profile derivation, precision mapping, cache keys, the
progress renderer in progress.py) is plain Python and tested on machines without TensorRT; ``tensorrt`` is imported only to build.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

from fusedops.errors import FusedopsError
from fusedops.plugins import native

from .profile import (DEFAULT_MAX_BATCH, InputInfo, Shape, check_batches, derive_profile, onnx_inputs, parse_shapes_arg,  # noqa: F401
                      shapes_from_args)
from .progress import ProgressRenderer, make_progress_monitor

log = logging.getLogger("fusedops.trt_build")

PRECISIONS = ("tf32", "fp32", "fp16", "bf16")
DEFAULT_WORKSPACE_MB = 4096
PLUGIN_LIBRARY_NAME = "libfusedops_trt.so"
CACHE_FORMAT = 1  # bump when the cache key's meaning changes


# ---------------------------------------------------------------------------------------------------------------------
# Precision
# ---------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrecisionPlan:
    """How one ``--precision`` maps onto a TensorRT builder config.

    set_flags / clear_flags: trt.BuilderFlag member names. required_input_dtype: with strongly typed networks (the
    only kind TensorRT 11 builds) types come from the model, so fp16 / bf16 need an ONNX model in that type."""

    precision: str
    set_flags: tuple[str, ...]
    clear_flags: tuple[str, ...]
    required_input_dtype: str | None = None


def precision_plan(precision: str, trt_major: int) -> PrecisionPlan:
    precision = (precision or "").lower()
    if precision not in PRECISIONS:
        raise FusedopsError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "fp32":
        # Strict FP32: TensorRT's own layers must not use TF32; our plugins follow their allow_tf32 field.
        return PrecisionPlan("fp32", (), ("TF32",))
    if precision == "tf32":
        return PrecisionPlan("tf32", ("TF32",), ())
    flag = "FP16" if precision == "fp16" else "BF16"
    if trt_major >= 11:
        # TensorRT 11 removed the weak-typing precision flags: the network is typed by the ONNX model.
        return PrecisionPlan(precision, ("TF32",), (), required_input_dtype="float16" if precision == "fp16"
                             else "bfloat16")
    return PrecisionPlan(precision, (flag, "TF32"), ())


# ---------------------------------------------------------------------------------------------------------------------
# Engine cache
# ---------------------------------------------------------------------------------------------------------------------

def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def onnx_content_hash(path: str | os.PathLike) -> str:
    """Hash of the model and its external data files (weights can live beside the .onnx)."""
    h = hashlib.sha256(bytes.fromhex(file_sha256(path)))
    try:
        import onnx  # lazy: onnx; trt_build stays light for serve.backends, which the CLI parser imports

        model = onnx.load(str(path), load_external_data=False)
        locations = sorted({e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"})
    except Exception:  # an unreadable model fails later, with the parser's message
        locations = []
    for loc in locations:
        p = Path(path).parent / loc
        h.update(loc.encode())
        h.update(bytes.fromhex(file_sha256(p)) if p.is_file() else b"missing")
    return h.hexdigest()


@dataclass(frozen=True)
class CacheKeyParts:
    onnx_hash: str
    tensorrt_version: str
    gpu_name: str
    compute_capability: str
    flags: Mapping[str, object]
    plugin_hash: str


def engine_cache_key(parts: CacheKeyParts) -> str:
    """A stable key over everything that decides the engine's bytes (and whether it runs on this GPU)."""
    payload = {"format": CACHE_FORMAT, **asdict(parts), "flags": dict(sorted(dict(parts.flags).items()))}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def build_flags(precision: str, profile: Mapping[str, tuple[Shape, Shape, Shape]], workspace_mb: int) -> dict:
    return {"precision": precision, "profile": {k: [list(s) for s in v] for k, v in sorted(profile.items())},
            "workspace_mb": int(workspace_mb)}


def gpu_identity(device: int = 0) -> tuple[str, str]:
    """(GPU name, compute capability "9.0") of ``device``; through torch or pycuda, whichever is present."""
    try:  # lazy: optional here, whichever of torch / pycuda is present
        import torch

        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(device)
            return p.name, f"{p.major}.{p.minor}"
    except Exception:
        pass
    try:  # lazy: optional (gpu extra)
        import pycuda.driver as cuda

        cuda.init()
        d = cuda.Device(device)
        major, minor = d.compute_capability()
        return d.name(), f"{major}.{minor}"
    except Exception as e:
        raise FusedopsError(f"cannot identify CUDA device {device} (no torch CUDA or pycuda): {e}") from None


def default_plugin_library() -> Path | None:
    """$FUSEDOPS_TRT_PLUGIN, else libfusedops_trt.so where the native libraries are (fusedops.plugins.native)."""
    env = os.environ.get("FUSEDOPS_TRT_PLUGIN")
    if env:
        return Path(env)
    p = native.library_dir() / PLUGIN_LIBRARY_NAME
    return p if p.is_file() else None


def tf32_plugin_nodes(onnx_path: str | os.PathLike) -> list[str]:
    """Names of the fusedops GEMM nodes whose allow_tf32 attribute is 1 (absent = the catalog default, 1)."""
    import onnx  # lazy: onnx, torch (catalog); trt_build stays light for serve.backends (CLI parser)
    from onnx import helper

    from fusedops.catalog import DOMAIN

    model = onnx.load(str(onnx_path), load_external_data=False)
    out = []
    for n in model.graph.node:
        if n.domain != DOMAIN or n.op_type != "GemmGroupNormAct":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if int(attrs.get("allow_tf32", 1)) == 1:
            out.append(n.name or n.output[0])
    return out


def has_fusedops_nodes(onnx_path: str | os.PathLike) -> bool:
    import onnx  # lazy: onnx, torch (catalog); trt_build stays light for serve.backends (CLI parser)

    from fusedops.catalog import DOMAIN

    model = onnx.load(str(onnx_path), load_external_data=False)
    return any(n.domain == DOMAIN for n in model.graph.node)


# ---------------------------------------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class BuildResult:
    engine_path: Path
    cache_key: str
    cached: bool
    seconds: float
    precision: str
    profile: dict
    tensorrt_version: str
    plugin_library: str | None
    metadata_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def _import_tensorrt():
    try:  # lazy: optional (gpu extra); its absence is reported in one line
        import tensorrt as trt  # noqa: F401
    except Exception as e:  # ImportError, or a broken install that fails to load its libraries
        raise FusedopsError(f"TensorRT's Python package is not usable here ({type(e).__name__}: {e}); install "
                            f"TensorRT 10.x/11.x with its builder (pip install tensorrt) on a machine with a GPU") from None
    return trt


def _trt_major(trt) -> int:
    try:
        return int(str(trt.__version__).split(".")[0])
    except (AttributeError, ValueError):
        return 10


def validate_build_args(onnx_path, engine_path, precision, min_batch, opt_batch, max_batch, workspace_mb,
                        force) -> tuple[Path, Path]:
    """The checks that need no TensorRT: paths, precision, batches, workspace."""
    src = Path(onnx_path)
    if not src.is_file():
        raise FusedopsError(f"ONNX model not found: {src}")
    dst = Path(engine_path)
    if dst.exists() and not force:
        raise FusedopsError(f"engine {dst} already exists; pass --force to overwrite it")
    if dst.exists() and dst.is_dir():
        raise FusedopsError(f"engine path {dst} is a directory")
    if (precision or "").lower() not in PRECISIONS:
        raise FusedopsError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    check_batches(min_batch, opt_batch, max_batch)
    if isinstance(workspace_mb, bool) or not isinstance(workspace_mb, int) or workspace_mb <= 0:
        raise FusedopsError(f"workspace_mb must be a positive integer (MiB), got {workspace_mb!r}")
    return src, dst


def build_engine(onnx_path, engine_path, precision: str = "tf32", min_batch: int = 1, opt_batch: int | None = None,
                 max_batch: int | None = None, workspace_mb: int = DEFAULT_WORKSPACE_MB, timing_cache=None,
                 cache_dir=None, plugin_library=None, force: bool = False, progress: bool = True,
                 shapes: Mapping[str, tuple[Shape, Shape, Shape]] | None = None, device: int = 0,
                 console=None) -> BuildResult:
    """Build (or take from the cache) a TensorRT engine for ``onnx_path`` and write it to ``engine_path``.

    precision: tf32 (default; TensorRT's layers may use TF32), fp32 (strict), fp16, bf16 (TensorRT 10: builder
    flags; TensorRT 11: the ONNX model must already be in that type). Batch: dim 0 of every dynamic-batch input
    ranges over [min_batch, max_batch] (opt at opt_batch, default max_batch). shapes: explicit (min, opt, max) per
    input for inputs with other dynamic dims. timing_cache: a file read if present and written after the build.
    cache_dir: engines cached by (ONNX content hash, TensorRT version, GPU + compute capability, flags, plugin
    library hash). plugin_library: libfusedops_trt.so (default $FUSEDOPS_TRT_PLUGIN, else the native library folder).
    force: overwrite engine_path and rebuild even when cached."""
    t0 = time.perf_counter()
    src, dst = validate_build_args(onnx_path, engine_path, precision, min_batch, opt_batch, max_batch, workspace_mb,
                                   force)
    precision = precision.lower()
    inputs = onnx_inputs(src)
    profile = derive_profile(inputs, min_batch, opt_batch, max_batch, shapes)

    plugin = Path(plugin_library) if plugin_library else default_plugin_library()
    if plugin is not None and not plugin.is_file():
        raise FusedopsError(f"plugin library not found: {plugin}")
    if plugin is None and has_fusedops_nodes(src):
        raise FusedopsError("the model has fusedops nodes but no plugin library was given or built "
                            f"({PLUGIN_LIBRARY_NAME}); pass --plugin-library or build plugins/ with CMake")

    notes = []
    if precision == "fp32":
        # TensorRT's flags do not reach plugin fields: the plugin GEMM follows each node's own allow_tf32.
        tf32_nodes = tf32_plugin_nodes(src)
        if tf32_nodes:
            notes.append(f"precision fp32 clears TensorRT's TF32 flag, but fusedops node(s) "
                         f"{', '.join(tf32_nodes)} have allow_tf32=1 and will still run their GEMM in TF32; "
                         f"export with allow_tf32=0 for a strict FP32 engine")
            log.warning(notes[-1])

    trt = _import_tensorrt()
    plan = precision_plan(precision, _trt_major(trt))
    if plan.required_input_dtype:
        wrong = [f"{i.name} ({i.elem_type})" for i in inputs
                 if i.elem_type not in (plan.required_input_dtype, "undefined")]
        if wrong:
            raise FusedopsError(f"TensorRT {trt.__version__} builds strongly typed networks: precision {precision} "
                                f"needs a {plan.required_input_dtype} ONNX model, but input(s) {', '.join(wrong)} "
                                f"are not; export the model in {plan.required_input_dtype}")
    gpu_name, cc = gpu_identity(device)
    key = engine_cache_key(CacheKeyParts(
        onnx_hash=onnx_content_hash(src), tensorrt_version=str(trt.__version__), gpu_name=gpu_name,
        compute_capability=cc, flags=build_flags(precision, profile, workspace_mb),
        plugin_hash=file_sha256(plugin) if plugin else "none"))
    result = BuildResult(engine_path=dst, cache_key=key, cached=False, seconds=0.0, precision=precision,
                         profile={k: [list(s) for s in v] for k, v in profile.items()},
                         tensorrt_version=str(trt.__version__), plugin_library=str(plugin) if plugin else None,
                         notes=notes)

    cached_plan = Path(cache_dir) / f"{key}.plan" if cache_dir else None
    if cached_plan is not None and cached_plan.is_file() and not force:
        _atomic_copy(cached_plan, dst)
        result.cached = True
        result.seconds = time.perf_counter() - t0
        result.metadata_path = _write_metadata(result)
        return result

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    if plugin is not None:
        # Registers the library's creators with the registry the ONNX parser consults (getCreators).
        builder.get_plugin_registry().load_library(str(plugin))
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(src)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise FusedopsError(f"TensorRT's ONNX parser rejected {src}: {errors}")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mb) << 20)
    for name in plan.set_flags:
        config.set_flag(getattr(trt.BuilderFlag, name))
    for name in plan.clear_flags:
        config.clear_flag(getattr(trt.BuilderFlag, name))
    opt_profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        t = network.get_input(i)
        if t.name not in profile:
            raise FusedopsError(f"TensorRT network input {t.name!r} is not an ONNX graph input")
        mn, op, mx = profile[t.name]
        opt_profile.set_shape(t.name, mn, op, mx)
    config.add_optimization_profile(opt_profile)

    cache_obj = None
    if timing_cache:
        tc_path = Path(timing_cache)
        data = tc_path.read_bytes() if tc_path.is_file() else b""
        cache_obj = config.create_timing_cache(data)
        config.set_timing_cache(cache_obj, ignore_mismatch=False)

    renderer = ProgressRenderer(console=console, enabled=bool(progress))
    if progress and hasattr(trt, "IProgressMonitor"):
        config.progress_monitor = make_progress_monitor(trt, renderer)
    with renderer:
        serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise FusedopsError(f"TensorRT could not build an engine for {src} (see the log above)")

    data = memoryview(serialized)
    _atomic_write(dst, data)
    if cached_plan is not None:
        cached_plan.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(cached_plan, data)
    if cache_obj is not None:
        _atomic_write(Path(timing_cache), memoryview(cache_obj.serialize()))
    result.seconds = time.perf_counter() - t0
    result.metadata_path = _write_metadata(result)
    return result


def _atomic_write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _atomic_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _write_metadata(result: BuildResult) -> Path:
    """<engine>.json beside the engine: how it was built (runtime.py reads the plugin library path from it)."""
    meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(result).items() if k != "metadata_path"}
    path = result.engine_path.with_name(result.engine_path.name + ".json")
    path.write_text(json.dumps(meta, indent=1))
    return path
