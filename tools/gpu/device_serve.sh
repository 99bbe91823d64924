#!/usr/bin/env bash
# The serving sweep of issue 9 on a CUDA machine, in one call (about 9.5 minutes with the defaults, of a device call's
# 10: leave TORCH_CUDA unset unless the call has nothing else to do):
#
#   OUT=<dir> tools/gpu/device_serve.sh
#
# 1. installs the package editable (no dependencies, no network) and builds libfusedops_ort.so with CUDA (sm_90
#    unless FUSEDOPS_CUDA_ARCHS says otherwise) plus the PyTorch ops' library;
# 2. `python -m fusedops.serve.sweep`: model 1 at bench size behind `fusedops serve --backend ort-cuda` (BACKEND; the
#    default server: the native backend, ORT in tritonserver's process, 2 instances), over loopback gRPC at batch 1
#    with concurrency 1 / 8 / 64 (DURATIONS, default 1:10 8:8 64:60 seconds) with dynamic batching; then, for
#    COMPARE_DURATIONS (default 1:5 8:4 64:8), the same fused model behind PyTriton's proxy (the earlier path) and
#    eager PyTorch through PyTriton (the baseline), and where COMPARE_INSTANCES is set the default server with that
#    many model instances at concurrency 64 only; in-process ModelNew latency; every response checked against
#    float64 eager PyTorch (TF32 tolerance); CLIENT_PROCESSES load-test processes (default: half the cores, <= 8);
#    where perf_analyzer runs (its wheel carried in .device/perf-analyzer/), the default server's points timed again
#    by it;
#    then tools/serve_profile.py against a fresh default server: where the c=1 time goes (Triton's statistics);
# 3. with TORCH_CUDA=1 also the fused side on the PyTorch CUDA ops (ModelNew in the stub; adds ~1.5 minutes);
#    QUEUE_DELAY_US sets the dynamic batcher's delay of the sweep and the profile (default 0), SWEEP_EXTRA adds
#    arguments of `python -m fusedops.serve.sweep` (e.g. "--skip-pytriton --compare-delay-us 0");
# 4. tests/gpu/test_serve_gpu.py on the default path (PyTorch CUDA ops, eager; the TensorRT engine through PyTriton
#    where TensorRT is installed), asserting correctness.
# Writes serve_sweep.json, serve_sweep.png (and torch_cuda/...) and the logs under $OUT.
#
# Needs what the GPU machine lacks (carried wheels, see docs/serving.md): onnxruntime-gpu, nvidia-pytriton 0.7.0 and
# tritonclient[grpc,http] with their dependencies, numpy 1.26 (PyTriton pins numpy<2). The serve wheels must be
# installed into the interpreter's own environment, not with pip --target on PYTHONPATH: PyTriton's Python-backend
# stub (a tritonserver child) sees that environment's site-packages only, and PyTriton finds tritonserver's bundled
# libraries (libcudart 12.6, ...) only next to a site-packages install (2026-11-23: both failed from /tmp/carried).
# So the wheels unpacked by ../shared/device/carry-wheel.sh's parts (/tmp/carried-whl/whl) are installed here;
# onnxruntime-gpu from ../shared/device/ort-gpu.sh stays in /tmp/ortgpu on PYTHONPATH (the serving process uses it).
# Needs third_party/eigen3 and third_party/onnxruntime (scripts/get_native_deps.sh) carried for the build.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/device}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [[ -d /tmp/carried-whl/whl ]]; then
  python3 -m pip install -q --no-deps --no-index --no-compile \
    $(ls /tmp/carried-whl/whl/*.whl | grep -v onnxruntime_gpu) >"$out/pip.log" 2>&1 || { tail -5 "$out/pip.log"; exit 1; }
fi
[[ -d /tmp/ortgpu ]] && export PYTHONPATH=/tmp/ortgpu${PYTHONPATH:+:$PYTHONPATH}
# perf_analyzer (Triton's C++ load generator; its manylinux_2_38 wheel, carried in .device/perf-analyzer/, runs on
# this machine's glibc): the sweep times the default server with it as well (fusedops/serve/perf_analyzer.py).
for w in .device/perf-analyzer/perf_analyzer-*.whl; do
  [[ -f $w ]] && python3 -m pip install -q --no-deps --no-index --no-compile "$w" >>"$out/pip.log" 2>&1
done
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import numpy, onnxruntime as o, pytriton, tritonclient; print('numpy', numpy.__version__, '| onnxruntime',
  o.__version__, o.get_available_providers(), '| pytriton ok')" 2>&1 | tee "$out/env.txt"
source "$(dirname "${BASH_SOURCE[0]}")/build_backend.sh"  # scikit-build-core, from carried wheels
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
python3 -c "from fusedops.serve import perf_analyzer as p; print('perf_analyzer:', p.unavailable_reason() or p.binary())" \
  2>&1 | tee -a "$out/env.txt"

t0=$SECONDS
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
# The PyTorch ops always: the sweep times in-process ModelNew on them (the issue's reference for the c = 1 target), and
# torch-cuda sides serve ModelNew (2026-11-23: BACKEND=torch-cuda failed at the server's start without
# libfusedops_torch.so; 2026-11-24: the ort-cuda sweep stopped at its in-process reference without it).
# triton_fusedops: the native backend (`--fused-server native`, `--server native`).
targets=(fusedops_ort fusedops fusedops_torch triton_fusedops)
torch_dir=(-DTorch_DIR="$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch")
if cmake -S plugins -B build/native "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFUSEDOPS_CUDA=ON \
     -DFUSEDOPS_CUDA_ARCHS="${FUSEDOPS_CUDA_ARCHS:-90}" "${torch_dir[@]}" >"$out/build.log" 2>&1 &&
   cmake --build build/native -j"$(nproc)" --target "${targets[@]}" >>"$out/build.log" 2>&1; then
  echo "native build OK in $((SECONDS - t0)) s: $(ls build/native/lib | tr '\n' ' ')"
else
  echo "native build FAILED"; tail -30 "$out/build.log"; exit 1
fi

# SWEEP=0 skips the sweep (a call that only builds and runs the GPU tests before a sweep call).
if [[ ${SWEEP:-1} == 1 ]]; then
t0=$SECONDS
procs=(); [[ -n ${CLIENT_PROCESSES:-} ]] && procs=(--client-processes "$CLIENT_PROCESSES")
# shellcheck disable=SC2086
# 450 s: at 330 s (H200, 2026-11-23 20:20 UTC) the sweep was cut in the eager baseline's first point, after the default
# path, its two-instance point and PyTriton's path (server start-ups and the bench-size reference take ~2.5 minutes).
timeout "${SWEEP_TIMEOUT:-450}" python3 -m fusedops.serve.sweep --out "$out" --size bench \
  --backend "${BACKEND:-ort-cuda}" --durations ${DURATIONS:-1:10 8:8 64:60} \
  --compare-durations ${COMPARE_DURATIONS:-1:5 8:4 64:8} \
  ${COMPARE_INSTANCES:+--compare-instances "$COMPARE_INSTANCES"} \
  --max-queue-delay-us "${QUEUE_DELAY_US:-0}" "${procs[@]}" ${SWEEP_EXTRA:-} >"$out/sweep.log" 2>&1
rc=$?; echo "sweep rc=$rc in $((SECONDS - t0)) s (1: a target missed, 2: an error)"; tail -40 "$out/sweep.log"
[[ $rc -ge 2 ]] && status=1
fi

# Where the c=1 time goes on the default path: bare client loops + Triton's statistics (about 20 s; PROFILE=0 skips
# it where perf_analyzer's server breakdown in the sweep says enough).
if [[ ${PROFILE:-1} == 1 && ${SWEEP:-1} == 1 ]]; then
t0=$SECONDS
ports=$(python3 -c "from fusedops.serve.process import free_loopback_ports as f; print(*f(2))")
read -r hp gp <<<"$ports"
python3 -m fusedops serve "$out/model1_bench.onnx" --backend "${BACKEND:-ort-cuda}" --http-port "$hp" \
  --grpc-port "$gp" --metrics-port 0 --max-queue-delay-us "${QUEUE_DELAY_US:-0}" --triton-log "$out/profile_triton.log" >"$out/profile_serve.log" 2>&1 &
spid=$!
for _ in $(seq 120); do grep -q "ready:" "$out/profile_serve.log" && break; sleep 0.5; done
timeout 120 python3 tools/serve_profile.py --http "127.0.0.1:$hp" --grpc "127.0.0.1:$gp" --requests 2000 \
  --json "$out/serve_profile.json" 2>&1 | tee "$out/serve_profile.log"
kill -TERM "$spid"; wait "$spid"; echo "profile in $((SECONDS - t0)) s (server exit $?)"
fi

if [[ ${TORCH_CUDA:-0} == 1 ]]; then
  t0=$SECONDS
  # shellcheck disable=SC2086
  timeout 240 python3 -m fusedops.serve.sweep --out "$out/torch_cuda" --size bench --backend torch-cuda \
    --skip-baseline --skip-pytriton --durations ${DURATIONS:-1:20 8:15 64:30} "${procs[@]}" \
    >"$out/sweep_torch_cuda.log" 2>&1
  echo "torch-cuda sweep rc=$? in $((SECONDS - t0)) s"; tail -25 "$out/sweep_torch_cuda.log"
fi

if [[ ${TESTS:-1} == 1 ]]; then  # TESTS=0: no GPU tests (a sweep call after a tests call)
t0=$SECONDS
# The default path's GPU tests for the PyTorch backends and the engine (the sweep above already checked every
# response of both servers for ort-cuda); TESTS_FILTER="" runs them all.
timeout "${TESTS_TIMEOUT:-180}" python3 -m pytest tests/gpu/test_serve_gpu.py -q -p no:cacheprovider -rfE \
  -k "${TESTS_FILTER-(tritonserver and torch) or engine}" \
  >"$out/tests_serve_gpu.log" 2>&1
rc=$?; [[ $rc -ne 0 ]] && status=1
echo "GPU serve tests rc=$rc in $((SECONDS - t0)) s: $(tail -1 "$out/tests_serve_gpu.log")"
grep -E "^(FAILED|ERROR|SKIPPED)" "$out/tests_serve_gpu.log" | head -20
fi
# The device tool brings back 8 files of $OUT (2026-11-27 08:57: serve_sweep.json and sweep.log were left out behind
# the build and perf_analyzer logs): everything but the results goes into one archive.
(cd "$out" && extra=() &&
 for f in *.log fused eager fused_* torch_cuda perf_analyzer; do
   [[ -e $f ]] || continue
   case $f in sweep.log | serve_profile.log | tests_serve_gpu.log) ;; *) extra+=("$f") ;; esac
 done
 if [[ ${#extra[@]} -gt 0 ]]; then tar czf logs.tgz --exclude='*.onnx' "${extra[@]}" && rm -rf "${extra[@]}"; fi)
rm -f "$out"/*.onnx
exit $status
