"""Kernel and plan code never reads the environment: variants are chosen by the planner by condition or forced through
the explicit plan options (``fusedops_plan_options`` / ``abi.PlanOptions``), so numerics, workspace and speed depend
on what the caller asked for, not on the process environment."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
NATIVE_SUFFIXES = {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp"}
# Native code that runs kernels: the kernels and planner, and the runtime adapters' paths into them.
SCANNED = ("plugins/csrc", "plugins/include", "plugins/ort", "plugins/torch", "plugins/trt")
# Allowed with the reason: a switch read once when the library is dlopen'ed, outside any kernel or plan.
ALLOWED = {
    "plugins/trt/plugin_library.cpp": "FUSEDOPS_TRT_AUTO_REGISTER: whether dlopen registers the creators",
}
ENV_READ = re.compile(r"\b(?:secure_getenv|getenv|_dupenv_s|environ)\b")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def native_sources() -> list[Path]:
    return sorted(p for d in SCANNED for p in (REPO_ROOT / d).rglob("*") if p.suffix in NATIVE_SUFFIXES)


def env_reads(text: str) -> list[str]:
    """The lines of C/C++/CUDA source ``text`` (comments removed) that read the environment."""
    code = COMMENT.sub("", text)
    return [ln.strip() for ln in code.splitlines() if ENV_READ.search(ln)]


def test_detector_finds_environment_reads():
    assert env_reads('int n() { return std::atoi(std::getenv("X")); }')
    assert env_reads('const char* v = secure_getenv("X");')
    assert env_reads("extern char** environ;")
    assert not env_reads('// no getenv here\n/* nor getenv\n here */ int x = 1;')


def test_no_environment_reads_in_native_code():
    found = {}
    for path in native_sources():
        rel = str(path.relative_to(REPO_ROOT))
        if rel in ALLOWED:
            continue
        hits = env_reads(path.read_text(errors="replace"))
        if hits:
            found[rel] = hits
    assert not found, f"environment reads in kernel / plan / adapter code (use fusedops_plan_options): {found}"


def test_scan_covers_the_kernels():
    names = {str(p.relative_to(REPO_ROOT)) for p in native_sources()}
    assert "plugins/csrc/cuda/gn_plan.cu" in names and "plugins/csrc/core/cpu_util.cpp" in names
    for rel in ALLOWED:
        assert rel in names, f"stale allowance: {rel}"
