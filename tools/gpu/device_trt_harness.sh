#!/usr/bin/env bash
# Build the TensorRT plugin library + harness with the CUDA kernels and run the harness tests on a GPU machine.
#
#   OUT=<dir> tools/gpu/device_trt_harness.sh [--full-bench] [--sanitize]
#
# Needs: nvcc + cuBLASLt, cmake, the TensorRT headers (third_party/tensorrt/include) and Eigen (third_party/eigen3),
# python3 with torch (CUDA) and pytest. Writes build.log, trt_tests.log, trt_timings.json (and sanitizer logs) to $OUT.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-$root/artifacts/trt}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
full=0; sanitize=0
for a in "$@"; do
  case $a in
    --full-bench) full=1 ;;
    --sanitize) sanitize=1 ;;
    *) echo "unknown flag $a" >&2; exit 2 ;;
  esac
done

source "$(dirname "${BASH_SOURCE[0]}")/build_backend.sh"  # scikit-build-core, from carried wheels
$py -m pip install -q --no-deps --no-build-isolation -e . >/tmp/fusedops_trt_install.log 2>&1 || {
  tail -20 /tmp/fusedops_trt_install.log; exit 1; }
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
t0=$SECONDS
{ cmake -S plugins -B build/native "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFUSEDOPS_CUDA=ON \
    -DFUSEDOPS_CUDA_ARCHS="${FUSEDOPS_CUDA_ARCHS:-90}" -DEIGEN_INCLUDE_DIR="$root/third_party/eigen3" \
    -DTENSORRT_INCLUDE_DIR="${TENSORRT_INCLUDE_DIR:-$root/third_party/tensorrt/include}" &&
  cmake --build build/native --target fusedops_trt fusedops_trt_harness -j"$(nproc)"; } >"$out/build.log" 2>&1 || {
  tail -40 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
lib=build/native/lib/libfusedops_trt.so
echo "exports: $(nm -D --defined-only "$lib" | awk '{print $3}' | tr '\n' ' ')"
echo "needs:   $(readelf -d "$lib" | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')"

rc=0
env FUSEDOPS_TRT_TIMINGS="$out/trt_timings.json" FUSEDOPS_TRT_FULL_BENCH=$full \
  $py -m pytest tests/test_trt_harness.py tests/gpu/test_trt_harness_gpu.py -q -rs -p no:cacheprovider \
  2>&1 | tee "$out/trt_tests.log" | grep -v "^\[plugin" | tail -30
[[ ${PIPESTATUS[0]} == 0 ]] || rc=1

if [[ $sanitize == 1 ]] && command -v compute-sanitizer >/dev/null; then
  # memcheck + initcheck over one enqueue of each op (odd sizes, extras, reduce, a strided ConvTranspose): the
  # plugin and kernels together.
  d=$(mktemp -d)
  $py - "$d" <<'EOF'
import sys, torch
d = sys.argv[1]
g = torch.Generator().manual_seed(3)
def w(name, t): t.contiguous().view(torch.uint8).numpy().tofile(f"{d}/{name}.bin")
w("x", torch.randn(5, 12, 7, 9, generator=g)); [w(n, torch.randn(12, generator=g)) for n in ("g", "b", "e")]
w("gx", torch.randn(37, 65, generator=g)); w("gw", torch.randn(96, 65, generator=g))
[w(n, torch.randn(96, generator=g)) for n in ("gb", "gg", "gbeta", "ge")]
w("cx", torch.randn(3, 16, 9, 11, generator=g)); w("cw", torch.randn(16, 24, 3, 3, generator=g) * 0.1)
[w(n, torch.randn(24, generator=g)) for n in ("cb", "cg", "cbeta")]
EOF
  h=build/native/bin/fusedops_trt_harness
  for tool in memcheck initcheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 $h --plugin "$lib" --op GroupNormAct --field num_groups:i32:4 \
      --field "pre:char:gelu" --field "post:char:mul(@0);mish" --field reduce:char:logsumexp --dynamic all \
      --input X:f32:5x12x7x9:$d/x.bin --input gamma:f32:12:$d/g.bin --input beta:f32:12:$d/b.bin \
      --input extra_0:f32:12:$d/e.bin --enqueue --output $d/y.bin >"$out/sanitize_gn_$tool.log" 2>&1
    echo "compute-sanitizer $tool GroupNormAct: rc=$? $(grep -E 'ERROR SUMMARY' "$out/sanitize_gn_$tool.log")"
    compute-sanitizer --tool $tool --error-exitcode 9 $h --plugin "$lib" --op GemmGroupNormAct \
      --field num_groups:i32:6 --field "pre:char:add(@0);hardtanh(-1,1);mish" --field allow_tf32:i32:0 \
      --input X:f32:37x65:$d/gx.bin --input W:f32:96x65:$d/gw.bin --input B:f32:96:$d/gb.bin \
      --input gamma:f32:96:$d/gg.bin --input beta:f32:96:$d/gbeta.bin --input extra_0:f32:96:$d/ge.bin \
      --enqueue --output $d/gy.bin >"$out/sanitize_gemm_$tool.log" 2>&1
    echo "compute-sanitizer $tool GemmGroupNormAct: rc=$? $(grep -E 'ERROR SUMMARY' "$out/sanitize_gemm_$tool.log")"
    compute-sanitizer --tool $tool --error-exitcode 9 $h --plugin "$lib" --op ConvTransposeGroupNormAct \
      --field num_groups:i32:6 --field "pre:char:gelu" --field strides:i32s:2,2 --field pads:i32s:1,1,1,1 \
      --field output_padding:i32s:1,1 --dynamic all --input X:f32:3x16x9x11:$d/cx.bin \
      --input W:f32:16x24x3x3:$d/cw.bin --input B:f32:24:$d/cb.bin --input gamma:f32:24:$d/cg.bin \
      --input beta:f32:24:$d/cbeta.bin --enqueue --output $d/cy.bin >"$out/sanitize_convt_$tool.log" 2>&1
    echo "compute-sanitizer $tool ConvTransposeGroupNormAct: rc=$? $(grep -E 'ERROR SUMMARY' "$out/sanitize_convt_$tool.log")"
  done
fi
exit $rc
