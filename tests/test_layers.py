"""Layer contracts (docs/layout.md): import-linter's contract from pyproject.toml, every module in a layer, no import
cycle between modules, and files of at most 500 lines.

The package is checked as it installs: pyproject's wheel.packages maps the top-level folders (models/, exporter/,
plugins/, trt_build/) under ``fusedops``, which import-linter (grimp) cannot follow in the repository, so the Python
files are copied into that layout in a temporary folder first.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# scikit-build-core's wheel.packages: {"fusedops": "fusedops", "fusedops/models": "models", ...}
PACKAGE_DIRS = {k.replace("/", "."): v for k, v in PYPROJECT["tool"]["scikit-build"]["wheel"]["packages"].items()}
MAX_LINES = 500
SIZE_CHECKED = ["fusedops", "exporter", "trt_build", "models"]  # and plugins/*.py (not its native sources)

grimp = pytest.importorskip("grimp", reason="import-linter (the 'test' extra) checks the layers")


@pytest.fixture(scope="module")
def installed_layout(tmp_path_factory) -> Path:
    """The Python files of the package laid out as pip installs them (wheel.packages applied)."""
    root = tmp_path_factory.mktemp("layout")
    for package, folder in PACKAGE_DIRS.items():
        dest = root.joinpath(*package.split("."))
        shutil.copytree(ROOT / folder, dest, dirs_exist_ok=True,
                        ignore=lambda d, names: [n for n in names if not (n.endswith(".py") or Path(d, n).is_dir())
                                                 or n in ("__pycache__", "csrc", "include", "ort", "torch", "trt")])
    return root


def _graph(layout: Path):
    sys.path.insert(0, str(layout))
    # An editable install's redirecting finder (scikit-build-core) sits in sys.meta_path ahead of the path finder and
    # would hand grimp the checkout instead of the copy: step around it while the graph is built.
    finders = list(sys.meta_path)
    sys.meta_path[:] = [f for f in finders if not type(f).__module__.startswith("_editable")]
    saved = {k: v for k, v in sys.modules.items() if k == "fusedops" or k.startswith("fusedops.")}
    for k in saved:  # grimp finds the package through importlib: let it find the copy, not the editable install
        del sys.modules[k]
    try:
        return grimp.build_graph("fusedops", cache_dir=None)
    finally:
        sys.path.remove(str(layout))
        sys.meta_path[:] = finders
        for k in [k for k in sys.modules if k == "fusedops" or k.startswith("fusedops.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _layers() -> list[list[str]]:
    (contract,) = [c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in layer.replace(":", "|").split("|")] for layer in contract["layers"]]


def test_import_linter_contracts_hold(installed_layout):
    # lint-imports, minus the editable install's redirecting finder (see _graph), so it reads the installed layout
    run_lint = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("
                "'_editable')]; sys.argv[0] = 'lint-imports'; from importlinter.cli import lint_imports_command; "
                "sys.exit(lint_imports_command())")
    proc = subprocess.run([sys.executable, "-c", run_lint, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=installed_layout,
                          env={"PYTHONPATH": str(installed_layout), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_every_module_is_in_a_layer_and_nothing_imports_cli(installed_layout):
    graph = _graph(installed_layout)
    layered = [m for layer in _layers() for m in layer]
    outside = sorted(m for m in graph.modules if m != "fusedops"
                     and not any(m == p or m.startswith(p + ".") for p in layered))
    assert outside == [], f"modules in no layer of pyproject's [tool.importlinter] contract: {outside}"
    cli = [m for m in graph.modules if m == "fusedops.cli" or m.startswith("fusedops.cli.")]
    importers = {m for c in cli for m in graph.find_modules_that_directly_import(c) if m not in cli}
    assert importers == {"fusedops.__main__"}


def test_no_import_cycles(installed_layout):
    """Tarjan's strongly connected components over module-level imports (function-local ones included)."""
    graph = _graph(installed_layout)
    modules = sorted(graph.modules)
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def visit(v):  # recursion depth is bounded by the import chain length (tens)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    assert cycles == []


def test_python_files_are_at_most_500_lines():
    files = [p for d in SIZE_CHECKED for p in (ROOT / d).rglob("*.py")] + list((ROOT / "plugins").glob("*.py"))
    too_long = {str(p.relative_to(ROOT)): n for p in files
                if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert too_long == {}
