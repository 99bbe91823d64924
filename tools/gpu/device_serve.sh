#!/usr/bin/env bash
# The serving sweep of issue 9 on a CUDA machine, in one call (about 5-6 minutes with the defaults):
#
#   OUT=<dir> tools/gpu/device_serve.sh
#
# 1. installs the package editable (no dependencies, no network) and builds libfusedops_ort.so with CUDA (sm_90
#    unless FUSEDOPS_CUDA_ARCHS says otherwise) plus the PyTorch ops' library;
# 2. `python -m fusedops.serve.sweep`: model 1 at bench size behind `fusedops serve --backend ort-cuda`, loaded over
#    loopback gRPC at batch 1 with concurrency 1 / 8 / 64 (DURATIONS, default 1:20 8:15 64:60 seconds) with dynamic
#    batching; the same sweep serving eager PyTorch through PyTriton (the baseline); in-process ModelNew latency;
#    every response checked against float64 eager PyTorch (TF32 tolerance);
# 3. with TORCH_CUDA=1 also the fused side on the PyTorch CUDA ops (ModelNew behind PyTriton; adds ~2 minutes);
# 4. tests/gpu/test_serve_gpu.py (a short run of the same paths, asserting correctness).
# Writes serve_sweep.json, serve_sweep.png (and torch_cuda/...) and the logs under $OUT.
#
# Needs on PYTHONPATH what the GPU machine lacks (carried wheels, see docs/serving.md): onnxruntime-gpu,
# nvidia-pytriton 0.7.0 and tritonclient[grpc,http] with their dependencies, numpy 1.26 (PyTriton pins numpy<2).
# /tmp/ortgpu and /tmp/carried (where ../shared/device/ort-gpu.sh and carry-wheel.sh install) are added if present.
# Needs third_party/eigen3 and third_party/onnxruntime (scripts/get_native_deps.sh) carried for the build.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/device}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
for d in /tmp/carried /tmp/ortgpu; do [[ -d $d ]] && export PYTHONPATH=$d${PYTHONPATH:+:$PYTHONPATH}; done
# PyTriton finds tritonserver's bundled libraries (libcudart 12.6, ...) next to its package only when it is installed
# in a site-packages folder; installed with pip --target (how wheels are carried here) it looks elsewhere.
[[ -d /tmp/carried/nvidia_pytriton.libs ]] &&
  export LD_LIBRARY_PATH=/tmp/carried/nvidia_pytriton.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import numpy, onnxruntime as o, pytriton, tritonclient; print('numpy', numpy.__version__, '| onnxruntime',
  o.__version__, o.get_available_providers(), '| pytriton ok')" 2>&1 | tee "$out/env.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }

t0=$SECONDS
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if cmake -S plugins -B build/native "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFUSEDOPS_CUDA=ON \
     -DFUSEDOPS_CUDA_ARCHS="${FUSEDOPS_CUDA_ARCHS:-90}" >"$out/build.log" 2>&1 &&
   cmake --build build/native -j"$(nproc)" --target fusedops_ort fusedops >>"$out/build.log" 2>&1; then
  echo "native build OK in $((SECONDS - t0)) s: $(ls build/native/lib | tr '\n' ' ')"
else
  echo "native build FAILED"; tail -30 "$out/build.log"; exit 1
fi

t0=$SECONDS
# shellcheck disable=SC2086
timeout "${SWEEP_TIMEOUT:-420}" python3 -m fusedops.serve.sweep --out "$out" --size bench --backend ort-cuda \
  --durations ${DURATIONS:-1:20 8:15 64:60} >"$out/sweep.log" 2>&1
rc=$?; echo "sweep rc=$rc in $((SECONDS - t0)) s (1: a target missed, 2: an error)"; tail -40 "$out/sweep.log"
[[ $rc -ge 2 ]] && status=1

if [[ ${TORCH_CUDA:-0} == 1 ]]; then
  t0=$SECONDS
  # shellcheck disable=SC2086
  timeout 240 python3 -m fusedops.serve.sweep --out "$out/torch_cuda" --size bench --backend torch-cuda \
    --skip-baseline --durations ${DURATIONS:-1:20 8:15 64:60} >"$out/sweep_torch_cuda.log" 2>&1
  echo "torch-cuda sweep rc=$? in $((SECONDS - t0)) s"; tail -25 "$out/sweep_torch_cuda.log"
fi

t0=$SECONDS
timeout "${TESTS_TIMEOUT:-180}" python3 -m pytest tests/gpu/test_serve_gpu.py -q -p no:cacheprovider -rfE \
  >"$out/tests_serve_gpu.log" 2>&1
rc=$?; [[ $rc -ne 0 ]] && status=1
echo "GPU serve tests rc=$rc in $((SECONDS - t0)) s: $(tail -1 "$out/tests_serve_gpu.log")"
grep -E "^(FAILED|ERROR|SKIPPED)" "$out/tests_serve_gpu.log" | head -20
exit $status
