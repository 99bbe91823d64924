#!/usr/bin/env bash
# CUTLASS headers for the sm_90 fused GEMM kernels (plugins/csrc/cuda/cutlass), from the nvidia-cutlass wheel on PyPI
# (it ships CUTLASS's C++ include tree as cutlass_library/source/include). Never vendored, never committed:
#   third_party/wheels/nvidia_cutlass-<version>-py3-none-any.whl   the wheel (6.4 MB: the light thing to carry to a
#                                                                  machine without network)
#   third_party/cutlass/include/{cutlass,cute}/...                 its headers (27 MB), what CMake uses
# Idempotent: present headers are kept; a wheel already in third_party/wheels is unpacked without a download.
# CUTLASS_INCLUDE_DIR (a folder holding cutlass/cutlass.h) skips all of this. The kernels use CUTLASS internals (the
# sm_90 collective and kernel interfaces), so the version is pinned; pyproject.toml's `cutlass` extra pins the same.
set -euo pipefail
version=${FUSEDOPS_CUTLASS_VERSION:-4.2.0.0}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tp="$root/third_party"
python=${PYTHON:-python3}

if [[ -n ${CUTLASS_INCLUDE_DIR:-} && -f ${CUTLASS_INCLUDE_DIR}/cutlass/cutlass.h ]]; then
  echo "cutlass: using CUTLASS_INCLUDE_DIR=$CUTLASS_INCLUDE_DIR"; exit 0
fi
if [[ -f $tp/cutlass/include/cutlass/cutlass.h && -f $tp/cutlass/VERSION && $(cat "$tp/cutlass/VERSION") == "$version" ]]; then
  echo "cutlass: $version present in third_party/cutlass/include"; exit 0
fi
wheel=$(ls "$tp"/wheels/nvidia_cutlass-"$version"-*.whl 2>/dev/null | head -1 || true)
if [[ -z $wheel ]]; then
  echo "cutlass: downloading nvidia-cutlass==$version (headers only: --no-deps)"
  mkdir -p "$tp/wheels"
  "$python" -m pip download -q --no-deps --only-binary=:all: "nvidia-cutlass==$version" -d "$tp/wheels"
  wheel=$(ls "$tp"/wheels/nvidia_cutlass-"$version"-*.whl | head -1)
fi
rm -rf "$tp/cutlass"
"$python" - "$wheel" "$tp/cutlass" <<'PY'
import sys, zipfile, pathlib
wheel, dest = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = "cutlass_library/source/include/"
n = 0
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            out = dest / "include" / name[len(prefix):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(name))
            n += 1
if n == 0 or not (dest / "include/cutlass/cutlass.h").is_file():
    sys.exit(f"cutlass: {wheel} has no {prefix}cutlass/cutlass.h")
print(f"cutlass: {n} headers unpacked into {dest / 'include'}")
PY
echo "$version" >"$tp/cutlass/VERSION"
