#!/usr/bin/env bash
# Fetch the header-only native dependencies into third_party/ (git-ignored) WITHOUT touching the system:
#   third_party/eigen3/Eigen/...              Eigen 3 (Debian package libeigen3-dev)
#   third_party/onnxruntime/include/*.h       ONNX Runtime C/C++ API headers (Debian trixie libonnxruntime-dev, ORT 1.21)
# apt runs with a private state/cache dir and (for trixie) a private sources list; packages are only unpacked with
# dpkg -x, never installed. Idempotent and offline-friendly: a dependency already present (or given through
# EIGEN_INCLUDE_DIR / ORT_INCLUDE_DIR) is skipped.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tp="$root/third_party"
mkdir -p "$tp"

have_eigen() { [[ -f "$1/Eigen/Dense" ]]; }
have_ort() { [[ -f "$1/onnxruntime_cxx_api.h" && -f "$1/onnxruntime_c_api.h" ]]; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# apt-get download with private lists/cache; $1 = sources list file ("" = the system's), $2.. = packages.
apt_fetch() {
  local sources=$1; shift
  local state="$tmp/state.$RANDOM"
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
  local opts=(-o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o "Debug::NoLocking=1"
              -o "APT::Sandbox::User=root")
  if [[ -n $sources ]]; then
    opts+=(-o "Dir::Etc::SourceList=$sources" -o "Dir::Etc::SourceParts=/dev/null")
  fi
  apt-get "${opts[@]}" -qq update >/dev/null
  (cd "$tmp" && apt-get "${opts[@]}" -qq download "$@" >/dev/null)
}

# ---- Eigen 3 ----
if [[ -n ${EIGEN_INCLUDE_DIR:-} ]] && have_eigen "$EIGEN_INCLUDE_DIR"; then
  echo "eigen: using EIGEN_INCLUDE_DIR=$EIGEN_INCLUDE_DIR"
elif have_eigen "$tp/eigen3"; then
  echo "eigen: present in third_party/eigen3"
else
  echo "eigen: downloading libeigen3-dev"
  apt_fetch "" libeigen3-dev
  dpkg -x "$tmp"/libeigen3-dev_*.deb "$tmp/eigen"
  rm -rf "$tp/eigen3"
  cp -r "$tmp/eigen/usr/include/eigen3" "$tp/eigen3"
  have_eigen "$tp/eigen3" || { echo "eigen: Eigen/Dense missing after unpacking" >&2; exit 1; }
fi

# ---- ONNX Runtime C/C++ API headers ----
if [[ -n ${ORT_INCLUDE_DIR:-} ]] && have_ort "$ORT_INCLUDE_DIR"; then
  echo "onnxruntime: using ORT_INCLUDE_DIR=$ORT_INCLUDE_DIR"
elif have_ort "$tp/onnxruntime/include"; then
  echo "onnxruntime: headers present in third_party/onnxruntime/include"
else
  echo "onnxruntime: downloading libonnxruntime-dev (Debian trixie)"
  cat > "$tmp/trixie.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
SRC
  apt_fetch "$tmp/trixie.list" libonnxruntime-dev
  dpkg -x "$tmp"/libonnxruntime-dev_*.deb "$tmp/ort"
  hdr=$(dirname "$(find "$tmp/ort" -name onnxruntime_cxx_api.h | head -1)")
  [[ -d $hdr ]] || { echo "onnxruntime: onnxruntime_cxx_api.h not in the package" >&2; exit 1; }
  rm -rf "$tp/onnxruntime"
  mkdir -p "$tp/onnxruntime/include"
  cp "$hdr"/*.h "$tp/onnxruntime/include/"   # headers only; the package's library is not needed
  have_ort "$tp/onnxruntime/include" || { echo "onnxruntime: headers incomplete" >&2; exit 1; }
fi
echo "native deps ready in third_party/"
