#!/usr/bin/env bash
# ConvTransposeGroupNormAct on a GPU machine (issue 13): build libfusedops for sm_90 (no CUTLASS: the convolution
# kernels do not use it, and it triples the build), the two convolution test files, compute-sanitizer on the wgmma
# kernel, and tools/convt_bench.py; on request the op on ONNX Runtime's CUDA EP. Logs and JSON go to $OUT.
#
#   OUT=<dir> tools/gpu/device_convt.sh [build] [tests] [sanitize] [bench] [ort]   (default: the first four)
#   BENCH_ARGS: extra tools/convt_bench.py flags (default: batches 1 16 128, every precision)
#   ort (only when named): the ConvTransposeGroupNormAct cases of tests/gpu/test_ort_cuda.py and
#   tools/ort_convt_bench.py (ORT_BENCH_ARGS, default: batches 1 16 128, tf32 and bf16) into $OUT/ort_convt.json.
#   Needs onnxruntime-gpu (../shared/device/ort-gpu.sh installs it into /tmp/ortgpu, put on PYTHONPATH here) and
#   libfusedops_ort.so with CUDA, which the build step makes when third_party/onnxruntime (and eigen3) is carried.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/convt}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
steps=${*:-build tests sanitize bench}
has() { [[ " $steps " == *" $1 "* ]]; }
rc=0

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
date -u +"device date: %Y-%m-%dT%H:%M:%SZ"
if has build; then
  source "$(dirname "${BASH_SOURCE[0]}")/build_backend.sh"
  $py -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
  t0=$SECONDS
  touch plugins/csrc/cuda/*.cu plugins/csrc/cuda/sm90/*.cu  # the machine may keep stale objects of other trees
  # Every target (the PyTorch ops too) for sm_90 only; CUTLASS is not carried, so its GEMM kernels are not built.
  if ! FUSEDOPS_CUDA_ARCHS=90 $py -m fusedops build-native --cuda on --verbose >"$out/build.log" 2>&1; then
    grep -E "error" "$out/build.log" | head -30; tail -30 "$out/build.log"; exit 1
  fi
  echo "native build: $((SECONDS - t0)) s"
  cuobjdump -res-usage build/native/lib/libfusedops.so 2>/dev/null | grep -A1 "convt_sm90_kernel" | tail -1
  [[ -f build/native/lib/libfusedops_ort.so ]] && echo "libfusedops_ort.so built" ||
    echo "libfusedops_ort.so not built (no ORT headers: carry third_party/onnxruntime from scripts/get_native_deps.sh)"
fi
if has tests; then
  $py -m pytest -v -s -p no:cacheprovider --timeout 120 ${PYTEST_K:+-k "$PYTEST_K"} \
    tests/gpu/test_convt_wgmma_gpu.py tests/gpu/test_convt_gpu.py \
    >"$out/tests.log" 2>&1 || rc=1
  grep -E "^\[convt|PASSED|FAILED|ERROR|passed|failed" "$out/tests.log" | grep -v "PASSED" | tail -40
  grep -cE "PASSED" "$out/tests.log"
fi
if has sanitize; then
  cases="(against_float64 and (model4_small or one_d or cout128 or pads_wider or persistent_many or persistent_ring))"
  cases+=" or ring_producer or (3xtf32_on_wgmma and (model4_small or persistent_many))"
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 $py -m pytest -q -p no:cacheprovider \
      tests/gpu/test_convt_wgmma_gpu.py -k "$cases" \
      >"$out/sanitize_$tool.log" 2>&1
    echo "compute-sanitizer $tool rc=$?: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$out/sanitize_$tool.log" | tail -2 | tr '\n' ' ')"
  done
fi
if has bench; then
  $py tools/convt_bench.py ${BENCH_ARGS:---batches 1 16 128} --json "$out/convt_bench.json" 2>&1 | tee "$out/bench.log" || rc=1
fi
if has ort; then
  [[ -d /tmp/ortgpu ]] && export PYTHONPATH=/tmp/ortgpu${PYTHONPATH:+:$PYTHONPATH}  # onnxruntime-gpu, where carried
  if ! why=$($py -c "import sys
try:
    import onnxruntime as o
except ImportError as e:
    sys.exit(f'onnxruntime is not importable: {e}')
if 'CUDAExecutionProvider' not in o.get_available_providers():
    sys.exit(f'onnxruntime {o.__version__} has no CUDAExecutionProvider (carry onnxruntime-gpu: ../shared/device/ort-gpu.sh)')
from fusedops import ort as fo
r = fo.unavailable_reason('CUDAExecutionProvider')
sys.exit(f'{r.splitlines()[0]} (run the build step with third_party/onnxruntime carried)' if r else 0)" 2>&1); then
    echo "ort step skipped: ${why:-the check failed}"; rc=1
  else
    $py -m pytest -v -s -p no:cacheprovider --timeout 300 -k test_convtranspose tests/gpu/test_ort_cuda.py \
      >"$out/ort_tests.log" 2>&1 || rc=1
    grep -E "FAILED|ERROR|SKIPPED|passed|failed" "$out/ort_tests.log" | tail -40
    $py tools/ort_convt_bench.py ${ORT_BENCH_ARGS:---batches 1 16 128} --json "$out/ort_convt.json" 2>&1 |
      tee "$out/ort_bench.log" || rc=1
  fi
fi
exit $rc
