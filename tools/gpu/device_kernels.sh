#!/usr/bin/env bash
# Build libfusedops with CUDA on a GPU machine, then check and time its kernels; logs and JSON go to $OUT.
#
#   OUT=<dir> tools/gpu/device_kernels.sh [build] [smoke] [tests] [bench] [ab] [gelu] [sanitize] [ncu]
#   (default: build smoke tests bench sanitize; ab = old vs new kernel variants, gelu = exhaustive GELU accuracy)
#
# FUSEDOPS_CUDA_ARCHS (default "80;89;90", the CMake default) picks the architectures; PYTEST_K filters the tests.
# Needs Eigen headers in third_party/eigen3 (scripts/get_native_deps.sh) or EIGEN_INCLUDE_DIR.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/kernels}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
steps=${*:-build smoke tests bench sanitize}
rc=0
has() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
date -u +"device date: %Y-%m-%dT%H:%M:%SZ"
if has build; then
  source "$(dirname "${BASH_SOURCE[0]}")/build_backend.sh"  # scikit-build-core, from carried wheels
  $py -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
  t0=$SECONDS
  # The device keeps ignored build outputs between calls (and other jobs build there too): make sure the kernel
  # objects are rebuilt from the sources that travelled with this call.
  touch plugins/csrc/cuda/*
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  if ! { cmake -S plugins -B build/native "${gen[@]}" -DFUSEDOPS_CUDA=ON \
           -DFUSEDOPS_CUDA_ARCHS="${FUSEDOPS_CUDA_ARCHS:-80;89;90}" &&
         cmake --build build/native --target fusedops -j"$(nproc)"; } >"$out/build.log" 2>&1; then
    tail -60 "$out/build.log"; exit 1
  fi
  echo "native build: $((SECONDS - t0)) s"
  grep -E "warning" "$out/build.log" | grep -v "third_party" | head -20
fi
if has smoke; then
  $py tools/kernel_bench.py smoke 2>&1 | tee "$out/smoke.log" || rc=1
fi
if has tests; then
  timeout 300 $py -m pytest tests/gpu/test_kernels_gpu.py tests/gpu/test_gemm_kernels_gpu.py -q -rs -x -p no:cacheprovider -s ${PYTEST_K:+-k "$PYTEST_K"} \
    2>&1 | tee "$out/tests.log" | grep -E "\[16-bit|passed|failed|error|FAILED|Error|assert" | tail -80
  [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
fi
if has bench; then
  $py tools/kernel_bench.py bench --json "$out/kernels_bench.json" 2>&1 | tee "$out/bench.log" || rc=1
fi
if has ab; then
  $py tools/kernel_bench.py ab --json "$out/kernels_ab.json" 2>&1 | tee "$out/ab.log" || rc=1
fi
if has gelu; then
  nvcc -std=c++17 -O3 -arch=sm_90 -Iplugins/include -Iplugins/csrc tools/gelu_accuracy.cu -o build/native/gelu_accuracy \
    && build/native/gelu_accuracy 2>&1 | tee "$out/gelu_accuracy.log" || rc=1
fi
if has ncu; then
  ncu --clock-control none -k regex:gn_ --section SpeedOfLight --section Occupancy --section LaunchStats \
    $py tools/kernel_bench.py profile >"$out/ncu.log" 2>&1 || rc=1
  grep -E "^  [a-z_]+.*gn_|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Size|Grid Size" "$out/ncu.log" | head -120
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    echo "+ compute-sanitizer --tool $tool --error-exitcode 3 $py tools/kernel_bench.py smoke"
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 $py tools/kernel_bench.py smoke \
      >"$out/sanitize_$tool.log" 2>&1
    src=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAIL|Error" "$out/sanitize_$tool.log" | tail -5
    echo "$tool exit code: $src"
    [[ $src == 0 ]] || rc=1
  done
fi
exit $rc
