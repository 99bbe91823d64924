"""Python driver of the headers-only TensorRT plugin harness (this folder; test-only code, not in the package).

Builds ``fusedops_trt_harness`` and the plugin library with CMake (they need the TensorRT headers, see
``scripts/get_tensorrt_headers.md``), writes a case's inputs as raw files, runs the harness, and reads its JSON report
and output back. The harness walks a plugin through every call TensorRT makes (up to enqueue on machines without a
GPU; enqueue too with ``enqueue=True``); the caller compares the output with eager PyTorch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
import torch

from fusedops import catalog
from fusedops.convtranspose import ConvAttrs
from fusedops.errors import FusedopsError

REPO_ROOT = Path(__file__).resolve().parents[2]
# The ops libfusedops_trt registers: the op spec's (fusedops/spec/ops.toml, `adapters`).
PLUGIN_OPS = catalog.ops_registered_by("tensorrt")
DTYPE_CODES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32"}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}


def tensorrt_include_dir() -> Path | None:
    """The TensorRT headers: $TENSORRT_INCLUDE_DIR when set (and only it), else third_party/tensorrt/include; None
    if absent."""
    env = os.environ.get("TENSORRT_INCLUDE_DIR")
    cand = Path(env) if env else REPO_ROOT / "third_party" / "tensorrt" / "include"
    return cand if (cand / "NvInferRuntime.h").is_file() else None


def native_build_dir() -> Path:
    """The native build folder: $FUSEDOPS_BUILD_DIR, else build/native at the repository root."""
    return Path(os.environ.get("FUSEDOPS_BUILD_DIR", REPO_ROOT / "build" / "native"))


@dataclass(frozen=True)
class HarnessBuild:
    harness: Path
    plugin: Path
    real_kernels: bool  # False: libfusedops_trt_buildphase.so (no CUDA kernels; enqueue fails by design)
    # libfusedops_trt_wsmodel.so: kernel stand-ins with the CUDA planner's (non-monotone) workspace sizes; None if
    # this configuration predates it
    wsmodel_plugin: Path | None = None


def build_harness(build_dir: Path | None = None, jobs: int | None = None) -> HarnessBuild:
    """Configure (if needed) and build the plugin library and the harness; FusedopsError says why it cannot."""
    include = tensorrt_include_dir()
    if include is None:
        raise FusedopsError("TensorRT headers not found: set TENSORRT_INCLUDE_DIR or fetch them into "
                            "third_party/tensorrt/include (see scripts/get_tensorrt_headers.md)")
    if shutil.which("cmake") is None:
        raise FusedopsError("cmake not found on PATH")
    bdir = Path(build_dir) if build_dir else native_build_dir()
    bdir.mkdir(parents=True, exist_ok=True)
    cfg = ["cmake", "-S", str(REPO_ROOT / "plugins"), "-B", str(bdir), f"-DTENSORRT_INCLUDE_DIR={include}"]
    _run(cfg, "configure")
    targets_file = bdir / "fusedops_trt_targets.txt"
    if not targets_file.is_file():
        raise FusedopsError("the CMake configuration skipped the TensorRT plugin (no CUDA runtime headers?); "
                            "see the configure log")
    targets = dict(line.split("=", 1) for line in targets_file.read_text().split() if "=" in line)
    plugin_target = targets["plugin"]
    wsmodel_target = targets.get("wsmodel")
    _run(["cmake", "--build", str(bdir), "--target", plugin_target, "fusedops_trt_harness",
          *([wsmodel_target] if wsmodel_target else []), "-j", str(jobs or os.cpu_count() or 2)], "build")
    return HarnessBuild(harness=bdir / "bin" / "fusedops_trt_harness", plugin=bdir / "lib" / f"lib{plugin_target}.so",
                        real_kernels=plugin_target == "fusedops_trt",
                        wsmodel_plugin=bdir / "lib" / f"lib{wsmodel_target}.so" if wsmodel_target else None)


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise FusedopsError(f"TensorRT harness {what} failed:\n{tail}")


# ---------------------------------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------------------------------

def fields_from_attrs(op: str, attrs: catalog.FusedAttrs) -> list[str]:
    """The plugin fields exactly as TensorRT's ONNX parser passes the node's attributes: INT → INT32, INTS → INT32
    list, FLOAT → FLOAT32, STRING → CHAR bytes without a NUL. Returned as harness ``--field`` arguments."""
    out = []
    for name, value in attrs.onnx_attrs(op).items():
        if isinstance(value, (list, tuple)):
            out.append(f"{name}:i32s:{','.join(str(int(v)) for v in value)}")
        elif isinstance(value, bool) or isinstance(value, int):
            out.append(f"{name}:i32:{int(value)}")
        elif isinstance(value, float):
            out.append(f"{name}:f32:{value!r}")
        else:
            out.append(f"{name}:char:{value}")
    return out


@dataclass
class HarnessInput:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    data: torch.Tensor | None = None  # needed for enqueue

    @classmethod
    def of(cls, name: str, t: torch.Tensor) -> "HarnessInput":
        return cls(name, tuple(t.shape), t.dtype, t)


@dataclass
class HarnessCase:
    op: str
    fields: list[str]
    inputs: list[HarnessInput]
    dynamic: str = "batch"  # which dims of X the IExprBuilder keeps symbolic: batch | all | none
    expect_fail: str | None = None  # stage at which the plugin must refuse cleanly
    no_fields: bool = False
    profile_batch: tuple[int, int, int] | None = None  # X's batch (min, opt, max); default 1 / actual / 2x actual
    workspace_probe: bool = False  # check getWorkspaceSize over the profile against every single batch in it
    # Descriptions onShapeChange and enqueue get instead of the build shapes: name -> (dtype, shape); "Y" the output
    runtime: dict[str, tuple[torch.dtype, tuple[int, ...]]] = field(default_factory=dict)
    enqueue_only: dict[str, tuple[torch.dtype, tuple[int, ...]]] = field(default_factory=dict)  # enqueue alone
    fake_buffers: bool = False  # enqueue refusal without CUDA (expect_fail="enqueue" only)


@dataclass
class HarnessResult:
    report: dict
    returncode: int
    stderr: str
    output: torch.Tensor | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def stages(self) -> list[str]:
        return self.report.get("stages", [])


def run_case(build: HarnessBuild, case: HarnessCase, workdir: Path, enqueue: bool = False, iters: int = 0,
             timeout: float = 600, plugin: Path | None = None) -> HarnessResult:
    """Run one case; ``plugin`` replaces the configuration's plugin library (e.g. ``build.wsmodel_plugin``)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [str(build.harness), "--plugin", str(plugin or build.plugin), "--op", case.op, "--dynamic", case.dynamic]
    for f in case.fields:
        cmd += ["--field", f]
    if case.no_fields:
        cmd.append("--no-fields")
    for k, inp in enumerate(case.inputs):
        spec = f"{inp.name}:{DTYPE_CODES[inp.dtype]}:{'x'.join(str(d) for d in inp.shape)}"
        if enqueue:
            if inp.data is None:
                raise ValueError(f"input {inp.name} has no data to enqueue")
            path = workdir / f"in{k}.bin"
            _write_raw(inp.data, path)
            spec += f":{path}"
        cmd += ["--input", spec]
    out_path = workdir / "out.bin"
    if enqueue:
        cmd += ["--enqueue", "--output", str(out_path)]
        if iters:
            cmd += ["--iters", str(iters)]
    if case.expect_fail:
        cmd += ["--expect-fail", case.expect_fail]
    if case.profile_batch:
        cmd += ["--profile-batch", ":".join(str(b) for b in case.profile_batch)]
    if case.workspace_probe:
        cmd.append("--workspace-probe")
    for name, (dt, shape) in case.runtime.items():
        spec = f"{DTYPE_CODES[dt]}:{'x'.join(str(d) for d in shape)}"
        cmd += ["--runtime-output", spec] if name == "Y" else ["--runtime-input", f"{name}:{spec}"]
    for name, (dt, shape) in case.enqueue_only.items():
        cmd += ["--enqueue-input", f"{name}:{DTYPE_CODES[dt]}:{'x'.join(str(d) for d in shape)}"]
    if case.fake_buffers:
        cmd.append("--fake-buffers")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 2 or not lines:
        raise RuntimeError(f"harness did not run (rc={proc.returncode}): {proc.stderr.strip()[-2000:]}")
    report = json.loads(lines[-1])
    output = None
    if enqueue and "enqueue" in report.get("stages", []):
        dtype = CODE_DTYPES[report["output_dtype"]]
        raw = out_path.read_bytes()
        shape = report.get("runtime_output_shape", report["output_shape"])
        output = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
    return HarnessResult(report, proc.returncode, proc.stderr, output)


def _write_raw(t: torch.Tensor, path: Path) -> None:
    t = t.detach().contiguous().cpu()
    if t.numel() == 0:
        path.write_bytes(b"")
    else:  # no intermediate bytes copy: benchmark tensors are gigabytes
        t.view(torch.uint8).numpy().tofile(str(path))


def model_case(key: str, size: str = "small", batch: int | None = None, dtype: torch.dtype = torch.float32,
               seed: int = 0, allow_tf32: int = 1, device: str = "cpu", shapes_only: bool = False,
               fuse_conv: bool = False):
    """The fused-op case inside reference model ``key`` with its weights and a fresh input: returns
    (HarnessCase, finish, eager) where ``finish(op_output)`` applies what the model does after the fused op and
    ``eager`` is the reference model's own output (float32, on ``device``; inputs are written from the CPU).
    ``shapes_only``: no forward pass (eager is None; the inputs carry shapes, and data only where it costs nothing).
    ``fuse_conv`` (model 4): the whole model as one ConvTransposeGroupNormAct instead of GroupNormAct after
    PyTorch's transposed convolution."""
    from fusedops.models import get_entry

    entry = get_entry(key)
    model = entry.build(size).to(device)
    gen = torch.Generator().manual_seed(seed)
    if shapes_only:  # a stride-0 view: the bench inputs are gigabytes
        shape = list(entry.sizes(size).input_shape)
        shape[0] = batch or shape[0]
        x = torch.empty(1).expand(*shape)
    else:
        (x,) = entry.inputs(size, batch=batch, generator=gen, device=device)
    with torch.no_grad():
        eager = None if shapes_only else model(x)
        key = entry.key
        if key == "matmul_groupnorm_leakyrelu_sum":
            attrs = catalog.FusedAttrs(num_groups=model.gn.num_groups, epsilon=model.gn.eps,
                                       post=catalog.parse_chain(f"leaky_relu({model.leaky_relu.negative_slope});mul(2)"),
                                       allow_tf32=allow_tf32)
            tensors = [("X", x), ("W", model.fc.weight), ("B", model.fc.bias), ("gamma", model.gn.weight),
                       ("beta", model.gn.bias)]
            op, finish = "GemmGroupNormAct", (lambda y: y)
        elif key == "gemm_groupnorm_min_biasadd":
            gn = model.group_norm
            attrs = catalog.FusedAttrs(num_groups=gn.num_groups, epsilon=gn.eps, reduce="min", allow_tf32=allow_tf32)
            tensors = [("X", x), ("W", model.gemm.weight), ("B", model.gemm.bias), ("gamma", gn.weight),
                       ("beta", gn.bias)]
            bias = model.bias.detach()
            op, finish = "GemmGroupNormAct", (lambda y: y.float().to(bias.device) + bias)
        elif key == "gemm_biasadd_hardtanh_mish_groupnorm":
            gn = model.groupnorm
            pre = f"add(@0);hardtanh({model.hardtanh.min_val},{model.hardtanh.max_val});mish"
            attrs = catalog.FusedAttrs(num_groups=gn.num_groups, epsilon=gn.eps, pre=catalog.parse_chain(pre),
                                       allow_tf32=allow_tf32)
            tensors = [("X", x), ("W", model.gemm.weight), ("B", model.gemm.bias), ("gamma", gn.weight),
                       ("beta", gn.bias), ("extra_0", model.bias)]
            op, finish = "GemmGroupNormAct", (lambda y: y)
        elif key == "convtranspose2d_gelu_groupnorm" and fuse_conv:
            gn, ct = model.group_norm, model.conv_transpose
            conv = ConvAttrs(strides=tuple(ct.stride), pads=tuple(ct.padding) * 2,
                             output_padding=tuple(ct.output_padding), dilations=tuple(ct.dilation),
                             group=ct.groups)
            attrs = catalog.FusedAttrs(num_groups=gn.num_groups, epsilon=gn.eps, pre=catalog.parse_chain("gelu"),
                                       allow_tf32=allow_tf32, conv=conv)
            tensors = [("X", x), ("W", ct.weight), ("B", ct.bias), ("gamma", gn.weight), ("beta", gn.bias)]
            op, finish = "ConvTransposeGroupNormAct", (lambda y: y)
        elif key == "convtranspose2d_gelu_groupnorm":
            gn = model.group_norm
            attrs = catalog.FusedAttrs(num_groups=gn.num_groups, epsilon=gn.eps, pre=catalog.parse_chain("gelu"))
            ct = model.conv_transpose
            if shapes_only:  # output size of a transposed convolution, without running it
                hw = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, s, p, d, k, op in
                      zip(x.shape[2:], ct.stride, ct.padding, ct.dilation, ct.kernel_size, ct.output_padding)]
                conv = torch.empty(1).expand(x.shape[0], ct.out_channels, *hw)
            else:
                conv = ct(x)  # the transposed convolution stays in PyTorch (TensorRT's own layer)
            tensors = [("X", conv), ("gamma", gn.weight), ("beta", gn.bias)]
            op, finish = "GroupNormAct", (lambda y: y)
        else:  # pragma: no cover - the registry has four models
            raise FusedopsError(f"no harness case for model {key!r}")
    if shapes_only:
        inputs = [HarnessInput(n, tuple(t.shape), dtype if n in ("X", "W") else torch.float32) for n, t in tensors]
    else:
        inputs = [HarnessInput.of(n, (t.detach().to(dtype) if n in ("X", "W") else t.detach().float()).cpu())
                  for n, t in tensors]
    case = HarnessCase(op=op, fields=fields_from_attrs(op, attrs), inputs=inputs)
    return case, finish, eager

