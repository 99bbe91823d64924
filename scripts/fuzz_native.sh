#!/usr/bin/env bash
# Coverage-guided fuzzing of the native core's attribute parsers and descriptor checks (tests/native/fuzz_chain.cpp)
# with libFuzzer under ASan + UBSan, for a bounded time:
#   scripts/fuzz_native.sh [SECONDS]      default 30; FUSEDOPS_FUZZ_SECONDS overrides the default
# Seeds: the hostile chain corpus of tests/test_hostile_chain.py plus tests/native/fuzz_regressions/ (earlier
# findings, each replayed first). A finding fails the run (exit 1) and is left in build/fuzz/findings/; copy it to
# tests/native/fuzz_regressions/ and add its text to the chain corpus once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${FUSEDOPS_FUZZ_SECONDS:-30}}
clangxx=$(bash scripts/get_fuzz_toolchain.sh)
llvm="$(dirname "$(dirname "$clangxx")")"
export LD_LIBRARY_PATH="$(dirname "$llvm")/../x86_64-linux-gnu:$llvm/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=build/fuzz
mkdir -p "$out/corpus" "$out/findings"
"$clangxx" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Iplugins/include -Iplugins/csrc tests/native/fuzz_chain.cpp plugins/csrc/core/chain.cpp \
  plugins/csrc/core/check.cpp -o "$out/chain_fuzzer"

# Seeds from the hostile corpus: control byte 0x21 (err buffer of 297 bytes), then the text.
python=${PYTHON:-.venv/bin/python}
[[ -x $python ]] || python=python3
PYTHONPATH=tests "$python" - "$out/corpus" <<'PY'
import hashlib, sys
from pathlib import Path
from test_hostile_chain import CHAIN_CASES, REDUCE_CASES
out = Path(sys.argv[1])
for text, _ in CHAIN_CASES + REDUCE_CASES:
    for ctl in (b"\x21", b"\x01", b"\x61"):
        data = ctl + text[:8192]
        (out / hashlib.sha1(data).hexdigest()).write_bytes(data)
PY

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
shopt -s nullglob
regressions=(tests/native/fuzz_regressions/*)
if (( ${#regressions[@]} )); then
  "$out/chain_fuzzer" "${regressions[@]}" >"$out/regressions.log" 2>&1 || {
    tail -40 "$out/regressions.log"; echo "fuzz: a regression input fails again" >&2; exit 1; }
  echo "fuzz: ${#regressions[@]} regression input(s) replayed clean"
fi
set +e
"$out/chain_fuzzer" "$out/corpus" tests/native/fuzz_regressions -max_total_time="$seconds" -max_len=8200 \
  -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/findings/" -print_final_stats=1 >"$out/fuzz.log" 2>&1
rc=$?
set -e
grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|cov: " "$out/fuzz.log" | tail -3
if [[ $rc -ne 0 ]]; then
  tail -60 "$out/fuzz.log"
  echo "fuzz: FINDING (exit $rc); input saved under $out/findings/" >&2
  exit 1
fi
echo "fuzz: ${seconds} s under ASan + UBSan, no finding"
