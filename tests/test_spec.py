"""The op spec (fusedops/spec/ops.toml) and what is generated from it: the generated files are current, the spec's
rules hold (and a broken spec is named), ABI codes never move, the formula language parses and prints as the
backends need, every step's formula agrees with the hand-written reference in float64, and the hand-written
overrides are exactly the ones the spec lists."""

from __future__ import annotations

import copy
import math
import re
import sys

import pytest
import torch

from fusedops import catalog
from fusedops.spec import emit_c, formula, generate, tables

needs_tomllib = pytest.mark.skipif(sys.version_info < (3, 11), reason="reading ops.toml needs tomllib (Python 3.11+)")

# Codes are part of the C ABI and of serialized TensorRT engines: once shipped, never renumbered or reused.
SHIPPED_STEP_CODES = {
    "add": 1, "sub": 2, "mul": 3, "div": 4, "rsub": 5, "rdiv": 6, "relu": 7, "leaky_relu": 8, "sigmoid": 9,
    "silu": 10, "tanh": 11, "hardtanh": 12, "hardsigmoid": 13, "hardswish": 14, "mish": 15, "softplus": 16,
    "gelu": 17, "gelu_tanh": 18, "softsign": 19,
}


@needs_tomllib
def test_generated_files_are_current():
    stale = generate.differing(generate.render())
    assert not stale, f"stale generated files: {stale}; run `python -m fusedops.spec.generate` and commit them"


@needs_tomllib
def test_a_stale_or_missing_file_is_reported(tmp_path):
    files = generate.render()
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert generate.differing(files, tmp_path) == []
    (tmp_path / "plugins/csrc/core/step_formulas.h").write_text(files["plugins/csrc/core/step_formulas.h"] + "\n")
    (tmp_path / "docs/ops.md").unlink()
    assert generate.differing(files, tmp_path) == ["plugins/csrc/core/step_formulas.h", "docs/ops.md"]


@needs_tomllib
def test_generator_check_command(capsys):
    assert generate.main(["--check"]) == 0
    assert "generated files are current" in capsys.readouterr().out


def test_shipped_codes_never_move():
    codes = {s["name"]: s["code"] for s in tables.STEPS}
    for name, code in SHIPPED_STEP_CODES.items():
        assert codes.get(name) == code, f"step {name!r} must keep code {code}"
    assert len(set(codes.values())) == len(codes)
    assert tables.REDUCES == {"": 0, "min": 1, "max": 2, "sum": 3, "mean": 4, "logsumexp": 5}
    assert {k: v["code"] for k, v in tables.DTYPES.items()} == {"float32": 0, "float16": 1, "bfloat16": 2}
    assert {o["name"]: o["code"] for o in tables.OPS} == {"GroupNormAct": 1, "GemmGroupNormAct": 2,
                                                          "ConvTransposeGroupNormAct": 3}


# ---------------------------------------------------------------------------------------------------------------------
# The spec's rules: a broken entry is named
# ---------------------------------------------------------------------------------------------------------------------

def _raw():
    tomllib = pytest.importorskip("tomllib", reason="reading ops.toml needs tomllib (Python 3.11+)")
    from fusedops.spec import load

    with open(load.SPEC_PATH, "rb") as f:
        return tomllib.load(f)


def _attr(raw, name):
    return next(a for a in raw["attributes"] if a["name"] == name)


def _step(raw, name):
    return next(s for s in raw["steps"] if s["name"] == name)


@pytest.mark.parametrize("edit, message", [
    (lambda r: _step(r, "softsign").update(code=3), "code 3 is used twice"),
    (lambda r: _step(r, "softsign").update(name="soft-sign"), "name must be [a-z_]+"),
    (lambda r: _step(r, "softsign").update(formula="x / (1 + abs(y))"), "unknown name"),
    (lambda r: _step(r, "softsign").update(formula="x / (1 + abs(x)"), "expected ')'"),
    (lambda r: _step(r, "softsign").update(formula="2"), "the formula must use x"),
    (lambda r: _step(r, "softsign").update(fuser="hand"), "fuser = 'hand' and overrides.fuser"),
    (lambda r: _step(r, "softsign").update(overrides={"gpu": "x"}), "unknown override 'gpu'"),
    (lambda r: _step(r, "softsign").update(aliases=["relu"]), "alias 'relu' is also a step name"),
    (lambda r: _step(r, "softsign").update(params=[{"name": n, "default": 1.0} for n in "abc"]),
     "at most 2 parameters"),
    (lambda r: _step(r, "softplus")["params"][0].update(default=0.0), "parameter 'beta': default is 0"),
    (lambda r: _step(r, "hardtanh")["params"][0].update(default=2.0), "defaults break min <= max"),
    (lambda r: _step(r, "leaky_relu")["params"][0].update(name="x"), "is not a free identifier"),
    (lambda r: _step(r, "leaky_relu").update(onnx_op={"op": "LeakyRelu"}), "onnx_op.defaults"),
    (lambda r: r["ops"][0]["attributes"].append("frob"), "unknown attribute 'frob'"),
    (lambda r: r["attributes"][0].update(type="DOUBLE"), "type must be one of"),
    (lambda r: _attr(r, "strides").update(default=[1, 1]), "an INTS default must be []"),
    (lambda r: _attr(r, "pads").pop("per_dim"), "needs per_dim = 1 or 2"),
    (lambda r: _attr(r, "group").update(per_dim=1), "per_dim is for INTS attributes only"),
    (lambda r: r["ops"][2].update(adapters=["onnxruntime"]), "adapters must list some of"),
    (lambda r: r["ops"][2]["inputs"][1].update(optional=True), "only a per-channel input may be optional"),
])
def test_spec_errors_name_the_entry(edit, message):
    from fusedops.spec import load

    raw = copy.deepcopy(_raw())
    edit(raw)
    with pytest.raises(load.SpecError, match=re.escape(message)):
        load.check(raw)


# ---------------------------------------------------------------------------------------------------------------------
# The formula language
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, c", [
    ("x + v", "x + v"),
    ("a - (b - x)", "a - (b - x)"),
    ("(x - a) - b", "x - a - b"),
    ("x / (a * b)", "x / (a * b)"),
    ("-x * 2", "-x * 2.0f"),
    ("-(x * 2)", "-(x * 2.0f)"),
    ("- -x", "-(-x)"),
    ("where(x < 0, 0, where(x > a, a, x))", "x < 0.0f ? 0.0f : (x > a ? a : x)"),
    ("clamp(x + 3, 0, 6) / 6", "step_math::clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f"),
    ("log1p(exp(x)) * 0.70710678118654752", "log1pf(expf(x)) * 0.70710677f"),
    ("abs(x) + 1e-5", "fabsf(x) + 1e-05f"),
])
def test_formulas_print_as_c_in_the_tree_order(text, c):
    assert emit_c.c_expr(formula.parse(text, ["x", "v", "a", "b"])) == c


@pytest.mark.parametrize("text, message", [
    ("x +", "expected a number, a name or '('"),
    ("y", "unknown name"),
    ("frob(x)", "unknown function"),
    ("where(x, 1, 2)", "the condition of where must be a comparison"),
    ("x < 1", "only allowed as the condition of where"),
    ("exp(x, x)", "exp takes 1 argument(s), got 2"),
    ("x $ 2", "unexpected character '$'"),
    ("x x", "unexpected text after the formula"),
])
def test_bad_formulas_are_named(text, message):
    with pytest.raises(formula.FormulaError, match=re.escape(message)):
        formula.parse(text, ["x"])


def _torch_op(name, args):
    """The formula language in torch (float64 here): comparisons false for NaN, as in C."""
    fns = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "neg": torch.neg,
           "lt": torch.lt, "gt": torch.gt, "le": torch.le, "ge": torch.ge, "exp": torch.exp, "log": torch.log,
           "log1p": torch.log1p, "tanh": torch.tanh, "erf": torch.erf, "abs": torch.abs, "sqrt": torch.sqrt,
           "where": torch.where,
           "clamp": lambda t, lo, hi: torch.where(t < lo, lo, torch.where(t > hi, hi, t))}
    return fns[name](*args)


def evaluate(kind: catalog.StepKind, x: torch.Tensor, params=(), v=None) -> torch.Tensor:
    values = dict(zip(kind.param_names, params))
    values.update(x=x, v=v)
    full = lambda t: torch.as_tensor(t, dtype=x.dtype).expand_as(x)  # noqa: E731
    return formula.fold(kind.tree, full, lambda n: full(values[n]), _torch_op)


def _x64(n=4001):
    x = torch.linspace(-30, 30, n, dtype=torch.float64)
    return torch.cat([x, torch.randn(2000, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 3,
                      torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan], dtype=torch.float64)])


PARAM_CASES = {"leaky_relu": [(0.2,), (-0.5,)], "hardtanh": [(-0.5, 2.0), (-math.inf, 0.0), (1.0, math.inf)],
               "hardsigmoid": [(0.2, 0.5), (1.5, -0.25)], "softplus": [(2.0, 3.0), (0.5, 20.0), (-1.0, 5.0)]}


@pytest.mark.parametrize("name", list(catalog.STEP_KINDS))
def test_formula_agrees_with_the_reference_in_float64(name):
    """The spec's formula (what the C, CUDA and ONNX code is generated from) against the hand-written reference:
    two independent statements of each step, compared in float64 over [-30, 30], random values, ±0, ±inf, NaN."""
    kind = catalog.STEP_KINDS[name]
    x = _x64()
    cases = [(kind.defaults,)] + [(p,) for p in PARAM_CASES.get(name, [])]
    for (params,) in cases:
        if kind.binary:
            for v in (torch.full_like(x, 1.75), torch.randn(x.shape, dtype=torch.float64,
                                                             generator=torch.Generator().manual_seed(5))):
                want = kind.fn(x, v)
                torch.testing.assert_close(evaluate(kind, x, v=v), want, rtol=1e-12, atol=1e-12, equal_nan=True)
            continue
        want = kind.fn(x, *params)
        got = evaluate(kind, x, params)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True,
                                   msg=lambda m: f"{name}{params}: {m}")


# ---------------------------------------------------------------------------------------------------------------------
# Overrides: the hand-written code the spec lists is there, and nothing else is hand-written
# ---------------------------------------------------------------------------------------------------------------------

def _overridden(key):
    return {s["name"] for s in tables.STEPS if key in s.get("overrides", {})}


def test_function_body_overrides_are_the_spec_ones():
    from fusedops.exporter import functions

    assert set(functions.BODY_OVERRIDES) == _overridden("onnx")


def test_fuser_patterns_follow_the_spec():
    from fusedops.exporter import steps

    keys = {p.key for p in steps.STEP_PATTERNS}
    for s in tables.STEPS:
        if s.get("onnx_op"):
            assert s["name"] in keys, f"{s['name']}: no pattern for its onnx_op"
        if s.get("fuser", "formula") == "formula":
            assert f"{s['name']}_formula" in keys
        else:
            assert f"{s['name']}_formula" not in keys
    # A step the spec hands to exporter/steps.py has a hand-written pattern there: the extract of some pattern
    # names it (probed by key: the hand-written keys start with the step's name or its ONNX op's).
    hand_keys = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "rsub": "rsub", "rdiv": "rdiv",
                 "silu": "silu", "hardtanh": "clip", "mish": "mish_decomposed", "softplus": "softplus",
                 "gelu": "gelu_erf_div_0", "gelu_tanh": "gelu_tanh_pow_0"}
    assert {s["name"] for s in tables.STEPS if s.get("fuser") == "hand"} == set(hand_keys)
    assert set(hand_keys.values()) <= keys


def test_native_dispatch_lists_follow_the_spec():
    from pathlib import Path

    text = (Path(generate.REPO_ROOT) / "plugins/csrc/core/step_formulas.h").read_text()
    cuda = text[text.index("FUSEDOPS_CUDA_FORMULA_STEPS(X)"):]
    cpu = text[text.index("FUSEDOPS_CPU_FORMULA_BINARY_STEPS(X)"):text.index("FUSEDOPS_CUDA_FORMULA_STEPS(X)")]
    for s in tables.STEPS:
        row = f"X({s['name'].upper()}, {s['name']})"
        assert (row in cpu) == ("cpu" not in s.get("overrides", {})), s["name"]
        assert (row in cuda) == ("cuda" not in s.get("overrides", {})), s["name"]


def test_convtranspose_op_in_the_c_abi_registered_by_ort_only():
    """Op 3 comes from the spec (its hand-written #define is gone from fusedops.h) with ONNX ConvTranspose's INTS
    attributes; the ORT adapter registers it, the TensorRT adapter not yet, and the generated adapter lists say so."""
    header = (generate.REPO_ROOT / "plugins/include/fusedops/fusedops_spec.h").read_text()
    assert "FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT = 3" in header
    abi_h = (generate.REPO_ROOT / "plugins/include/fusedops/fusedops.h").read_text()
    assert "#define FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT" not in abi_h
    assert "X(kernel_shape, INTS, KERNEL, 0, 0, )" in header
    op = catalog.CONVTRANSPOSE_GROUP_NORM_ACT
    assert op.code == 3 and op.inputs == ("X", "W", "B", "gamma", "beta") and op.optional == ("B",)
    assert [a.name for a in op.attrs if a.type == "INTS"] == ["kernel_shape", "strides", "pads", "output_padding",
                                                              "dilations"]
    assert catalog.ops_registered_by("ort") == ("GroupNormAct", "GemmGroupNormAct", "ConvTransposeGroupNormAct")
    assert catalog.ops_registered_by("tensorrt") == ("GroupNormAct", "GemmGroupNormAct", "ConvTransposeGroupNormAct")
    for adapter in ("ORT", "TENSORRT"):
        table = header.split(f"#define FUSEDOPS_{adapter}_OPS(X)")[1].split("\n\n")[0].split("/*")[0]
        assert "CONVTRANSPOSE_GROUPNORM_ACT" in table and "GEMM_GROUPNORM_ACT" in table
