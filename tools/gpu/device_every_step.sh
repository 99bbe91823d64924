#!/usr/bin/env bash
# Every chain step of the op spec (softsign included) on the GPU runtimes, in one device call (NOTES.md "Device
# procedures"): install (no network), build the native libraries with CUDA for sm_90 (FUSEDOPS_CUDA_ARCHS to change),
# then the spec's per-step tests: CUDA kernels of both ops, PyTorch ops on CUDA, ORT library on the CUDA EP, softsign
# in 16-bit (tests/gpu/test_every_step_gpu.py), the kernels' own every-step test, and the CPU side for comparison.
#   OUT=<dir> tools/gpu/device_every_step.sh        logs under $OUT (default artifacts/every_step)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/every_step}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
[[ -d /tmp/ortgpu ]] && export PYTHONPATH=/tmp/ortgpu${PYTHONPATH:+:$PYTHONPATH}  # onnxruntime-gpu, where carried
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
source "$(dirname "${BASH_SOURCE[0]}")/build_backend.sh"  # scikit-build-core, from carried wheels
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 ||
  { tail -20 "$out/install.log"; exit 1; }
t0=$SECONDS
touch plugins/csrc/cuda/*  # rebuild the kernels from the sources that travelled with this call
export FUSEDOPS_CUDA_ARCHS=${FUSEDOPS_CUDA_ARCHS:-90}
if ! python3 -m fusedops build-native --cuda on >"$out/build.log" 2>&1; then
  echo "native build FAILED"; grep -E "error" "$out/build.log" | head -30; tail -30 "$out/build.log"; exit 1
fi
echo "native build OK in $((SECONDS - t0)) s"
# -v: a run cut off at its time limit still names what passed and failed so far.
timeout "${TESTS_TIMEOUT:-420}" python3 -m pytest -v -p no:cacheprovider -rfEs tests/gpu/test_every_step_gpu.py \
  "tests/gpu/test_kernels_gpu.py::test_every_step_alone" tests/test_every_step.py tests/test_softsign.py \
  >"$out/tests.log" 2>&1
rc=$?
echo "tests rc=$rc: $(tail -1 "$out/tests.log")"
grep -E "(FAILED|ERROR|SKIPPED)" "$out/tests.log" | head -30
exit $rc
