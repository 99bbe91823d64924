"""Function-local imports hide the import graph (issue 14): every import inside a function body of the package says
why it is there, with a ``# lazy: REASON`` comment on its line or the line above (docs/layout.md). A run of
consecutive imports (blank lines between them allowed) shares the comment above its first line. Everything else is
imported at module level."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the package's Python sources: wheel.packages maps these folders under ``fusedops`` (plugins/: its *.py only)
PACKAGE_FILES = sorted([p for d in ("fusedops", "exporter", "trt_build", "models") for p in (ROOT / d).rglob("*.py")]
                       + list((ROOT / "plugins").glob("*.py")))
MARK = "# lazy:"


def unexplained_local_imports(source: str) -> list[tuple[int, str]]:
    """(line, text) of each import in a function body with no ``# lazy:`` reason on its line, on the line above, or
    above the first import of the run of consecutive import (or blank) lines it belongs to."""
    lines = source.splitlines()
    functions = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    local = {node.lineno: node for f in functions for node in ast.walk(f)
             if isinstance(node, (ast.Import, ast.ImportFrom))}
    import_lines = {ln for node in local.values() for ln in range(node.lineno, (node.end_lineno or node.lineno) + 1)}

    def explained(node: ast.stmt) -> bool:
        if any(MARK in lines[ln - 1] for ln in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
            return True
        ln = node.lineno - 1  # up through the run of import lines, then the line above it
        while ln >= 1 and (ln in import_lines or not lines[ln - 1].strip()) and MARK not in lines[ln - 1]:
            ln -= 1
        return ln >= 1 and MARK in lines[ln - 1]

    return sorted((ln, lines[ln - 1].strip()) for ln, node in local.items() if not explained(node))


def test_the_package_has_sources_to_check():
    assert len(PACKAGE_FILES) > 50 and all(p.suffix == ".py" for p in PACKAGE_FILES)


@pytest.mark.parametrize("path", PACKAGE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_function_local_import_says_why(path):
    found = unexplained_local_imports(path.read_text())
    assert found == [], (f"{path.relative_to(ROOT)}: function-local import(s) without a '{MARK} REASON' comment "
                         f"(hoist them to module level, or say why not): {found}")


def test_the_check_catches_an_unexplained_import_and_accepts_explained_ones():
    bad = "import os\n\ndef f():\n    x = 1\n    import json\n    return json\n"
    assert unexplained_local_imports(bad) == [(5, "import json")]
    nested = "def f():\n    def g():\n        from a import b\n    return g\n"
    assert unexplained_local_imports(nested) == [(3, "from a import b")]
    method = "class C:\n    async def m(self):\n        import torch\n"
    assert unexplained_local_imports(method) == [(3, "import torch")]
    # a comment that does not start with the mark is not a reason
    noqa = "def f():\n    import torch  # noqa: F401\n"
    assert unexplained_local_imports(noqa) == [(2, "import torch  # noqa: F401")]
    explained = ("def f():\n    import torch  # lazy: heavy\n"
                 "def g():\n    # lazy: optional\n    import tensorrt\n"
                 "def h():\n    try:  # lazy: optional dependency\n        import pycuda.driver\n"
                 "        import pycuda.gpuarray\n    except ImportError:\n        pass\n"
                 "def k():\n    from m import (a,\n                   b)  # lazy: m is heavy\n"
                 "def m():\n    import torch  # lazy: heavy\n\n    from a import b\n"
                 "import json\n")
    assert unexplained_local_imports(explained) == []
    # a run ends at a non-import line: the comment above the first run does not cover a later import
    later = "def f():\n    # lazy: heavy\n    import torch\n    y = 2\n    import onnx\n"
    assert unexplained_local_imports(later) == [(5, "import onnx")]
