#!/usr/bin/env bash
# The wheel on a GPU machine in one call (docs/packaging.md): build a CUDA wheel from this checkout against the
# machine's torch (--no-build-isolation, so the PyTorch ops go into the package), install it into a venv that sees the
# machine's packages (--system-site-packages: the machine has no network, its image holds the dependencies), then
# from a folder outside the checkout: every packaged library resolves its dependencies (ldd), the PyTorch ops on CUDA
# (GroupNormAct, GemmGroupNormAct in strict FP32) and the ORT library (CPU EP, and the CUDA EP where onnxruntime-gpu
# is installed) against float64, with nothing built on first use.
#
#   OUT=<dir> tools/gpu/device_wheel.sh      (~4 min: the CUDA build for sm_90 is most of it; FUSEDOPS_CUDA_ARCHS=90)
#
# Carry third_party/eigen3 and third_party/onnxruntime (scripts/get_native_deps.sh), and, where the machine's Python
# lacks scikit-build-core (it has no network), its wheels (< 0.5 MB), fetched here first with
#   python3 -m pip download --no-deps --only-binary=:all: -d third_party/wheels \
#     "scikit-build-core>=0.11,<2" pathspec packaging
# Logs go to $OUT, a summary to stdout; exit status 0 only when every check passed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/wheel}
mkdir -p "$out"
py=${PYTHON:-python3}
work=$(mktemp -d)
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
date -u +"device date: %Y-%m-%dT%H:%M:%SZ"
source "$(dirname "${BASH_SOURCE[0]}")/build_backend.sh"  # scikit-build-core, from carried wheels
$py -c "import scikit_build_core; print('scikit-build-core', scikit_build_core.__version__)" || exit 1

t0=$SECONDS
if ! $py -m pip wheel . --no-build-isolation --no-deps -w "$work/dist" -C cmake.define.FUSEDOPS_CUDA=ON \
     -C "cmake.define.FUSEDOPS_CUDA_ARCHS=${FUSEDOPS_CUDA_ARCHS:-90}" -C build-dir=build/wheel_device -v \
     >"$out/wheel.log" 2>&1; then
  tail -40 "$out/wheel.log"; echo "wheel build FAILED"; exit 1
fi
grep -E "fusedops: (the wheel ships|PyTorch ops against)" "$out/wheel.log"
echo "wheel build: $((SECONDS - t0)) s; $(ls "$work"/dist)"

$py -m venv --system-site-packages "$work/venv" &&
  "$work/venv/bin/python" -m pip install -q --no-deps --no-index "$work"/dist/fusedops-*.whl >"$out/install.log" 2>&1 ||
  { cat "$out/install.log"; echo "install FAILED"; exit 1; }

mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
env -u PYTHONPATH -u FUSEDOPS_BUILD_DIR FUSEDOPS_CACHE_DIR="$work/cache" "$work/venv/bin/python" - <<'PY' 2>&1 |
import subprocess, sys
from pathlib import Path

import numpy as np
import torch

import fusedops
from fusedops.plugins import abi, native, torch_ops, torch_ops_build

failures = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)

lib_dir = native.library_dir()
check("site-packages" in str(Path(fusedops.__file__).resolve()), f"package imported from {fusedops.__file__}")
for lib in sorted(lib_dir.glob("*.so")):
    ldd = subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
    check("not found" not in ldd, f"ldd {lib.name}: " + ", ".join(ln.split()[0] for ln in ldd.splitlines()
                                                                  if "cublas" in ln or "not found" in ln))
check(abi.has_cuda(), "libfusedops.so built with CUDA")
ops_lib = torch_ops_build.library()
check(ops_lib.parent == lib_dir, f"PyTorch ops from the package: {ops_lib}")

g = torch.Generator().manual_seed(14)
x = torch.randn(8, 64, 32, 32, generator=g, dtype=torch.float64) * 2 + 0.5
gamma, beta = torch.randn(64, generator=g, dtype=torch.float64) + 1, torch.randn(64, generator=g, dtype=torch.float64)
y = torch_ops.group_norm_act(x.float().cuda(), gamma.float().cuda(), beta.float().cuda(), [], 8, 1e-5, "", "silu")
ref = torch.nn.functional.silu(torch.nn.functional.group_norm(x, 8, gamma, beta, 1e-5))
err = float((y.cpu().double() - ref).abs().max())
check(err < 1e-4, f"torch op GroupNormAct on CUDA vs float64: max |err| {err:.2e}")
w = torch.randn(256, 512, generator=g, dtype=torch.float64) / 512 ** 0.5
b = torch.randn(256, generator=g, dtype=torch.float64)
xg = torch.randn(128, 512, generator=g, dtype=torch.float64)
yg = torch_ops.gemm_group_norm_act(xg.float().cuda(), w.float().cuda(), b.float().cuda(), torch.ones(256).cuda(),
                                   torch.zeros(256).cuda(), [], num_groups=16, post="relu", allow_tf32=0)
refg = torch.relu(torch.nn.functional.group_norm(xg @ w.T + b, 16))
err = float((yg.cpu().double() - refg).abs().max())
check(err < 1e-3, f"torch op GemmGroupNormAct on CUDA (strict FP32) vs float64: max |err| {err:.2e}")

import onnx, onnxruntime as ort
from onnx import TensorProto, helper
import fusedops.ort as fo
C, G = 64, 8
nodes = [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["gn"], num_groups=G, epsilon=1e-5),
         helper.make_node("Relu", ["gn"], ["y"])]
inits = [helper.make_tensor("scale", TensorProto.FLOAT, [C], gamma[:C].float().numpy()),
         helper.make_tensor("bias", TensorProto.FLOAT, [C], beta[:C].float().numpy())]
io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", C, 16]) for n in ("x", "y")]
onnx.save(helper.make_model(helper.make_graph(nodes, "gn", io[:1], io[1:], initializer=inits),
                            opset_imports=[helper.make_opsetid("", 21)], ir_version=10), "gn.onnx")
subprocess.run([sys.executable, "-m", "fusedops", "fuse", "gn.onnx", "fused.onnx"], check=True)
xv = (torch.randn(4, C, 16, generator=g, dtype=torch.float64) * 3 + 1)
refo = torch.relu(torch.nn.functional.group_norm(xv, G, gamma[:C], beta[:C], 1e-5)).numpy()
for provider in ("CPUExecutionProvider", "CUDAExecutionProvider"):
    if provider not in ort.get_available_providers():
        print(f"skip {provider}: not in this onnxruntime ({ort.__version__})")
        continue
    kind = "cpu" if provider.startswith("CPU") else "cuda"
    before = fo.kernel_calls(kind)
    (got,) = fo.run(fo.session("fused.onnx", providers=[provider]), {"x": xv.float().numpy()})
    err = float(np.abs(got - refo).max())
    check(fo.kernel_calls(kind) - before == 1 and err < 1e-4,
          f"ORT {provider} with {fo.library_path().name}: kernel ran, max |err| {err:.2e}")
check(not (Path(torch_ops_build.cache_dir()) / "torch_ops").exists(), "nothing built on first use")
print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, fusedops {fusedops.__version__}")
sys.exit(1 if failures else 0)
PY
  tee "$out/checks.log"
rc=${PIPESTATUS[0]}
rm -rf "$work"
echo "total: $((SECONDS - t0)) s; checks $([[ $rc == 0 ]] && echo passed || echo FAILED)"
exit "$rc"
