#!/usr/bin/env bash
# One entry point that sets itself up on a fresh clone, then runs a job:
#   scripts/dev.sh demo [fusedops demo args]   export, fuse and run every reference model on every backend here
#   scripts/dev.sh test [pytest args]          the test suite (GPU tests skip with a reason where there is no GPU)
#   scripts/dev.sh setup                       only the set-up
# Set-up: a virtual environment in .venv (PyTorch first: FUSEDOPS_TORCH, default the CPU-capable torch==2.13.0, so
# pip does not pull a multi-GB CUDA build), the package in editable mode with its test, serve and cpu-blas extras
# (serve pins numpy<2 for PyTriton; the suite is measured to pass on numpy 1.26; cpu-blas: the CPU GEMM's OpenBLAS),
# header-only native dependencies into third_party/ and the native libraries into build/native/. Re-runs skip what
# is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:-}
[[ $# -gt 0 ]] && shift

python=${PYTHON:-python3}
venv=.venv
if [[ ! -x $venv/bin/python ]]; then
  "$python" -m venv "$venv"
fi
stamp=$venv/.fusedops-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "${FUSEDOPS_TORCH:-torch==2.13.0}"
  "$venv/bin/python" -m pip install -q -e ".[test,serve,cpu-blas]"
  touch "$stamp"
fi
bash scripts/get_native_deps.sh
"$venv/bin/fusedops" build-native

case $job in
  demo) exec "$venv/bin/fusedops" demo "$@" ;;
  test) exec "$venv/bin/python" -m pytest "$@" ;;
  setup) ;;
  *) echo "usage: scripts/dev.sh demo|test|setup [args]" >&2; exit 2 ;;
esac
