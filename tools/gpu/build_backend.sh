# Sourced by the device procedures before `pip install -e . --no-build-isolation`: the package's build backend is
# scikit-build-core, which the GPU machine's Python lacks and cannot download (no network). Where it is missing, it is
# installed from the wheels carried in third_party/wheels (fetch them once on the development machine:
#   python3 -m pip download --no-deps --only-binary=:all: -d third_party/wheels "scikit-build-core>=0.11,<2" pathspec packaging
# ) into a temporary folder put on PYTHONPATH for the rest of the procedure.
if ! "${PYTHON:-python3}" -c "import scikit_build_core" 2>/dev/null; then
  _backend=$(mktemp -d)
  if "${PYTHON:-python3}" -m pip install -q --no-index --find-links third_party/wheels --target "$_backend" \
       scikit-build-core; then
    export PYTHONPATH="$_backend${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "scikit-build-core is neither installed nor carried in third_party/wheels (see tools/gpu/build_backend.sh)" >&2
  fi
fi
