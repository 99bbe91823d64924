#!/usr/bin/env bash
# Fetch clang 14 with libFuzzer and the ASan / UBSan runtimes (Debian bookworm packages) into third_party/clang-14
# (git-ignored) WITHOUT touching the system: apt runs with a private state / cache, packages are only unpacked with
# dpkg -x. Shared libraries clang needs and the system lacks are unpacked beside it. Prints the clang++ path.
# Idempotent: a complete toolchain already there (or FUSEDOPS_CLANGXX naming one) is reused.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$root/third_party/clang-14"
clangxx="$dest/usr/lib/llvm-14/bin/clang++"
libpath="$dest/usr/lib/x86_64-linux-gnu:$dest/usr/lib/llvm-14/lib"

works() {  # $1 = clang++; compiles and runs a libFuzzer + ASan + UBSan program
  local t; t=$(mktemp -d)
  printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' > "$t/t.cpp"
  LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$1" -fsanitize=fuzzer,address,undefined \
    "$t/t.cpp" -o "$t/t" >/dev/null 2>&1 && "$t/t" -runs=1 >/dev/null 2>&1
  local rc=$?; rm -rf "$t"; return $rc
}

if [[ -n ${FUSEDOPS_CLANGXX:-} ]] && works "$FUSEDOPS_CLANGXX"; then
  echo "$FUSEDOPS_CLANGXX"; exit 0
fi
if [[ -x $clangxx ]] && works "$clangxx"; then
  echo "$clangxx"; exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
state="$tmp/state"
mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
opts=(-o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o "Debug::NoLocking=1"
      -o "APT::Sandbox::User=root")
apt-get "${opts[@]}" -qq update >/dev/null
fetch() { (cd "$tmp" && apt-get "${opts[@]}" -qq download "$@" >/dev/null); }
echo "clang-14: downloading the Debian packages" >&2
fetch clang-14 libclang-cpp14 libllvm14 libclang-common-14-dev libclang-rt-14-dev
rm -rf "$dest"
mkdir -p "$dest"
for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$dest"; done
rm -f "$tmp"/*.deb
# Libraries libLLVM needs (present on most systems; fetched only when missing here).
missing=$(LD_LIBRARY_PATH="$libpath" ldd "$dest/usr/lib/llvm-14/bin/clang" | awk '/not found/ {print $1}')
if [[ -n $missing ]]; then
  declare -A pkg=([libz3.so.4]=libz3-4 [libedit.so.2]=libedit2 [libxml2.so.2]=libxml2 [libffi.so.8]=libffi8
                  [libtinfo.so.6]=libtinfo6 [libbsd.so.0]=libbsd0 [libicuuc.so.72]=libicu72
                  [libmd.so.0]=libmd0)
  want=()
  for lib in $missing; do
    [[ -n ${pkg[$lib]:-} ]] || { echo "clang-14: no package known for $lib" >&2; exit 1; }
    want+=("${pkg[$lib]}")
  done
  fetch "${want[@]}"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/libs"; done
  find "$tmp/libs" -name '*.so*' -exec cp -P {} "$dest/usr/lib/x86_64-linux-gnu/" \;
fi
works "$clangxx" || { echo "clang-14: unpacked, but cannot build a libFuzzer + ASan + UBSan program" >&2; exit 1; }
echo "$clangxx"
