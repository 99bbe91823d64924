#!/usr/bin/env bash
# The CUTLASS GemmGroupNormAct kernel on a GPU machine (sm_90: H100/H200) in one call: build, tests, memcheck,
# timing and 3xTF32 accuracy tables. Logs and JSON go to $OUT; a compact summary goes to stdout.
#
#   OUT=<dir> tools/gpu/device_cutlass.sh [build] [tests] [sanitize] [bench] [accuracy] [models] [plain] [profile]
#   (default: build tests sanitize bench accuracy, ~7 min; two calls keep each under the 10-minute limit:
#   `build tests sanitize`, then `bench accuracy`. `models` adds tests/gpu/test_models_gpu.py + test_fused_ops_gpu.py, which needs the
#   PyTorch ops library and so a longer build)
#
# `plain` builds and times CUTLASS's own GEMM in the same tile configurations (tools/cutlass_plain_gemm.cu: the
# mainloop's floor); `profile` runs ncu on one fused call (PROFILE_ARGS, default model 1 TF32 configuration 1). BENCH_PRECISIONS limits `bench` (default: all).
# Carry third_party/eigen3 and third_party/wheels (the nvidia-cutlass wheel that scripts/get_cutlass.sh downloads,
# 6.4 MB; the machine has no network) or third_party/cutlass (its unpacked headers, 27 MB). Builds for sm_90 only
# into build/cutlass_device (FUSEDOPS_BUILD_DIR), so other builds on the machine are left alone.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/cutlass}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export FUSEDOPS_BUILD_DIR=$root/build/cutlass_device
steps=${*:-build tests sanitize bench accuracy}
rc=0
has() { [[ " $steps " == *" $1 "* ]]; }
t_all=$SECONDS

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
date -u +"device date: %Y-%m-%dT%H:%M:%SZ"
plain_pids=()
if has plain; then  # compiled in the background, next to the library's build
  mkdir -p "$root/build/cutlass_plain"
  bash scripts/get_cutlass.sh >/dev/null 2>&1
  for k in 0 1 2 3 4 5 6 7 8; do
    nvcc -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a \
      -isystem third_party/cutlass/include -DPLAIN_CFG=$k tools/cutlass_plain_gemm.cu \
      -o "$root/build/cutlass_plain/plain_$k" >"$out/plain_build_$k.log" 2>&1 &
    plain_pids+=($!)
  done
fi
if has build; then
  t0=$SECONDS
  source "$(dirname "${BASH_SOURCE[0]}")/build_backend.sh"  # scikit-build-core, from carried wheels
  $py -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
  bash scripts/get_cutlass.sh >"$out/get_cutlass.log" 2>&1 || { cat "$out/get_cutlass.log"; exit 1; }
  # Objects of other sources may be kept from earlier calls: rebuild from the sources that travelled with this one.
  find plugins/csrc -name '*.cu' -o -name '*.cpp' -o -name '*.cuh' -o -name '*.h' | xargs touch
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  targets=(--target fusedops)
  has models && targets=()
  torch_dir=$($py -c "import torch.utils, os; print(os.path.join(torch.utils.cmake_prefix_path, 'Torch'))")
  if ! { cmake -S plugins -B "$FUSEDOPS_BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFUSEDOPS_CUDA=ON \
           -DFUSEDOPS_CUDA_ARCHS=90 -DFUSEDOPS_CUTLASS_PTXAS_VERBOSE=ON -DTorch_DIR="$torch_dir" &&
         cmake --build "$FUSEDOPS_BUILD_DIR" "${targets[@]}" -j"$(nproc)"; } >"$out/build.log" 2>&1; then
    tail -60 "$out/build.log"; exit 1
  fi
  grep -E "fusedops: CUTLASS" "$out/build.log" | head -2
  # one line per CUTLASS kernel: registers / spills; any C7510 (wgmma serialised) line is a performance bug
  grep -E "C7510" "$out/build.log" | cut -c1-160 | head -5
  grep -E "bytes spill stores|Used [0-9]+ registers" "$out/build.log" | grep -B1 -A0 "registers" | sort | uniq -c | head -12
  echo "build: $((SECONDS - t0)) s"
fi
if has tests; then
  t0=$SECONDS
  # The accumulator layout the epilogue relies on, checked through CuTe on the host.
  nvcc -std=c++17 -O1 -DNDEBUG --expt-relaxed-constexpr -arch=sm_90a -Iplugins/include -Iplugins/csrc \
    -isystem third_party/cutlass/include tools/cutlass_layout_check.cu -o "$FUSEDOPS_BUILD_DIR/cutlass_layout_check" \
    >"$out/layout_check.log" 2>&1 && "$FUSEDOPS_BUILD_DIR/cutlass_layout_check" 2>&1 | tee -a "$out/layout_check.log" \
    || { echo "layout check FAILED (see layout_check.log)"; rc=1; }
  timeout 420 $py -m pytest tests/gpu/test_cutlass_gemm_gpu.py tests/test_gemm_choice.py -q -rsf --maxfail=3 \
    -p no:cacheprovider -s ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 | tee "$out/tests.log" \
    | grep -E "^\[cutlass|^\[3xtf32|passed|failed|error|FAILED|Error|assert|SKIP" | cut -c1-400 | tail -60
  [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
  echo "tests: $((SECONDS - t0)) s"
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    t0=$SECONDS
    quick=(); [[ $tool == racecheck ]] && quick=(--quick)  # racecheck is slower: one run of each mode
    echo "+ compute-sanitizer --tool $tool $py tools/cutlass_bench.py smoke ${quick[*]}"
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 $py tools/cutlass_bench.py smoke "${quick[@]}" \
      >"$out/sanitize_$tool.log" 2>&1
    src=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAIL|failure" "$out/sanitize_$tool.log" | tail -4
    echo "$tool exit code: $src ($((SECONDS - t0)) s)"
    [[ $src == 0 ]] || rc=1
  done
fi
# One mode of tools/cutlass_bench.py: its JSON and log, its table from the header line on, its errors, its time.
cutlass_table() {  # mode, the table's header line
  local t0=$SECONDS
  $py tools/cutlass_bench.py "$1" --json "$out/cutlass_$1.json" >"$out/$1.log" 2>&1 || rc=1
  sed -n "/^$2/,\$p" "$out/$1.log"
  grep -E "Error|error" "$out/$1.log" | head -5
  echo "$1: $((SECONDS - t0)) s"
}
if has plain; then
  wait "${plain_pids[@]}"
  for k in 0 1 2 3 4 5 6 7 8; do
    "$root/build/cutlass_plain/plain_$k" 2>&1 | tee -a "$out/plain.log" || { tail -5 "$out/plain_build_$k.log"; rc=1; }
  done
fi
if has bench; then
  bench_args=(); [[ -n ${BENCH_PRECISIONS:-} ]] && bench_args=(--precisions $BENCH_PRECISIONS)
  t0=$SECONDS
  $py tools/cutlass_bench.py bench "${bench_args[@]}" --json "$out/cutlass_bench.json" >"$out/bench.log" 2>&1 || rc=1
  sed -n "/^precision model/,\$p" "$out/bench.log"
  grep -E "Error|error" "$out/bench.log" | head -5
  echo "bench: $((SECONDS - t0)) s"
fi
if has accuracy; then  # 3xTF32 against eager FP32, 36 cases, with the verdict line
  cutlass_table accuracy "model K"
fi
if has profile; then  # ncu with stall sampling on one call: the summary and the 30 SASS lines that stall most
  for path in groups; do
    t0=$SECONDS
    timeout 300 ncu --kernel-name regex:device_kernel --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
      --metrics smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum,smsp__inst_executed.sum \
      -f -o "$out/prof_$path" $py tools/cutlass_bench.py profile ${PROFILE_ARGS:-} >"$out/ncu_$path.log" 2>&1 || rc=1
    ncu -i "$out/prof_$path.ncu-rep" --page details >>"$out/ncu_$path.log" 2>&1
    ncu -i "$out/prof_$path.ncu-rep" --page source --csv --print-source sass >"$out/sass_$path.csv" 2>&1
    rm -f "$out/prof_$path.ncu-rep"
    grep -E "^profile:|Duration|Compute \(SM\) Throughput|Warp Cycles Per Issued|local_|inst_executed.sum" \
      "$out/ncu_$path.log" | head -12
    $py tools/sass_hotspots.py "$out/sass_$path.csv" 30 || true
    echo "profile ($path): $((SECONDS - t0)) s"
  done
fi
echo "device_cutlass.sh: $((SECONDS - t_all)) s, exit $rc"
exit $rc
