#!/usr/bin/env bash
# The whole project on a GPU machine in one go (used through the device tool; see NOTES.md "Device procedures"):
# install (no network: --no-deps), build every native target (CUDA kernels for sm_80/89/90, ORT library with the
# CUDA EP, TensorRT plugin + harness when third_party/tensorrt is carried), the full test suite (CPU + GPU), the demo
# at benchmark sizes, and the benchmark. Logs, JSON and the PNG go to $OUT (default artifacts/device).
#   STEPS="build tests demo bench" (default all), TESTS_TIMEOUT, DEMO_TIMEOUT, BENCH_TIMEOUT (seconds),
#   BENCH_ARGS (extra `fusedops bench` flags), PYTEST_ARGS.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/device}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
[[ -d /tmp/ortgpu ]] && export PYTHONPATH=/tmp/ortgpu${PYTHONPATH:+:$PYTHONPATH}
steps=${STEPS:-build tests demo bench}
has() { [[ " $steps " == *" $1 "* ]]; }
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
source "$(dirname "${BASH_SOURCE[0]}")/build_backend.sh"  # scikit-build-core, from carried wheels
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }

if has build; then
  t0=$SECONDS
  [[ -d third_party/tensorrt/include ]] && export TENSORRT_INCLUDE_DIR="$root/third_party/tensorrt/include"
  # fusedops build-native: every target, the PyTorch ops against this machine's torch (Torch_DIR from torch.utils).
  if python3 -m fusedops build-native --cuda on --verbose >"$out/build.log" 2>&1; then
    echo "native build OK in $((SECONDS - t0)) s: $(ls build/native/lib | tr '\n' ' ')"
  else
    echo "native build FAILED"; grep -E "error|Error" "$out/build.log" | head -30; tail -30 "$out/build.log"; exit 1
  fi
fi

if has tests; then
  t0=$SECONDS
  timeout "${TESTS_TIMEOUT:-330}" python3 -m pytest tests -q -p no:cacheprovider -rfE ${PYTEST_ARGS:-} \
    --junitxml="$out/tests.xml" >"$out/tests.log" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && status=1
  echo "tests rc=$rc in $((SECONDS - t0)) s: $(tail -1 "$out/tests.log")"
  grep -E "^(FAILED|ERROR)" "$out/tests.log" | head -20
fi

if has demo; then
  t0=$SECONDS
  timeout "${DEMO_TIMEOUT:-240}" python3 -m fusedops demo --size bench --repeats 10 --out-dir /tmp/fusedops-demo --force \
    >"$out/demo.log" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && status=1
  cp /tmp/fusedops-demo/demo.json "$out/" 2>/dev/null
  echo "demo rc=$rc in $((SECONDS - t0)) s"
fi

if has bench; then
  t0=$SECONDS
  timeout "${BENCH_TIMEOUT:-300}" python3 -m fusedops bench --out-dir "$out" ${BENCH_ARGS:-} >"$out/bench.log" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && status=1
  echo "bench rc=$rc in $((SECONDS - t0)) s"
fi
[[ -f "$out/demo.log" ]] && tail -40 "$out/demo.log"
[[ -f "$out/bench.log" ]] && tail -45 "$out/bench.log"
exit $status
