"""Differential fuzz (hypothesis, bounded, derandomized in CI):

1. chain / reduce text: the catalog's parser and the native one (plugins/csrc/core/chain.cpp) give the same outcome
   (steps as float32, or the same message) on random bytes and on grammar-shaped near-misses;
2. fused nodes: generated attributes (chains of every step with their parameters, reductions, epsilon), shapes
   (ranks 2-5, zero-sized batches) and special values (NaN, ±inf in X and in the extra inputs) run through the ONNX
   Runtime library and through the standard-ONNX function bodies, both compared with the float64 reference: the
   same NaN / ±inf positions and close finite values.

Examples that fail are printed by hypothesis as a reproducible case; add them to the hostile suites once fixed."""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from fusedops import catalog
from fusedops.exporter import functions
from hostile_support import native_chain, native_lib, native_reduce, python_chain, python_reduce

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                derandomize=bool(os.environ.get("CI")))
INF = math.inf


@pytest.fixture(scope="module")
def lib():
    return native_lib()


# ---------------------------------------------------------------------------------------------------------------------
# 1. The two parsers
# ---------------------------------------------------------------------------------------------------------------------

_NAMES = list(catalog.STEP_KINDS) + list(catalog.STEP_ALIASES) + ["Relu", "relu2", "gelu_", "", "_", "frob"]
_NUMBERS = st.one_of(
    st.from_regex(r"\A[+-]?(inf|[0-9]{0,4}\.?[0-9]{0,4}([eE][+-]?[0-9]{0,3})?)\Z"),
    st.floats(allow_nan=False).map(repr),
    st.sampled_from(["@0", "@7", "@8", "@", "@01", "@x", "nan", "Inf", "0x1p3", "1e39", "-3.4028236e38", "--1"]),
)
_WS = st.text(alphabet=" \t\n\r\x0b\x0c", max_size=2)


@st.composite
def _chain_text(draw) -> bytes:
    steps = []
    for _ in range(draw(st.integers(0, 18))):
        name = draw(st.sampled_from(_NAMES))
        if draw(st.booleans()):
            args = draw(st.lists(_NUMBERS, max_size=3))
            name += draw(_WS) + "(" + ",".join(draw(_WS) + a + draw(_WS) for a in args) + ")"
        steps.append(draw(_WS) + name + draw(_WS))
    text = ";".join(steps).encode()
    if draw(st.integers(0, 9)) == 0:  # a stray byte somewhere
        pos = draw(st.integers(0, len(text)))
        text = text[:pos] + bytes([draw(st.integers(1, 255))]) + text[pos:]
    return text


@settings(max_examples=int(os.environ.get("FUSEDOPS_FUZZ_EXAMPLES", 600)), **SETTINGS)
@given(text=_chain_text())
def test_parsers_agree_on_grammar_shaped_text(lib, text):
    assert native_chain(lib, text) == python_chain(text)


@settings(max_examples=int(os.environ.get("FUSEDOPS_FUZZ_EXAMPLES", 600)), **SETTINGS)
@given(text=st.binary(max_size=80).map(lambda b: b.replace(b"\x00", b"")))
def test_parsers_agree_on_random_bytes(lib, text):
    assert native_chain(lib, text) == python_chain(text)
    assert native_reduce(lib, text) == python_reduce(text)


@settings(max_examples=300, **SETTINGS)
@given(text=st.text(max_size=40).map(lambda s: s.replace("\x00", "")))
def test_parsers_agree_on_unicode_text(lib, text):
    data = text.encode("utf-8", "surrogatepass")
    assert native_chain(lib, data) == python_chain(text) == python_chain(data)


# ---------------------------------------------------------------------------------------------------------------------
# 2. Library vs function bodies vs reference
# ---------------------------------------------------------------------------------------------------------------------

_SCALARS = [-2.0, -0.5, 0.5, 1.5, 3.0, INF, -INF]
_EXTRA_VALUES = [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]  # away from 0: div(@k) stays well conditioned


@st.composite
def _step(draw, first: bool) -> tuple[str, bool]:
    """(step text, uses extra 0)"""
    names = [n for n in catalog.STEP_KINDS if n != "rdiv" or first]  # v / x: only where x is away from 0
    name = draw(st.sampled_from(names))
    kind = catalog.STEP_KINDS[name]
    if kind.binary:
        if draw(st.booleans()):
            return f"{name}(@{draw(st.integers(0, 1))})", True
        v = draw(st.sampled_from(_SCALARS if name not in ("div", "rdiv") else [-2.0, 0.5, 3.0]))
        return f"{name}({catalog._float_text(v)})", False
    if name == "leaky_relu":
        return f"leaky_relu({draw(st.sampled_from([0.01, 0.2, -0.5, 1.5]))})", False
    if name == "hardtanh":
        lo, hi = sorted(draw(st.lists(st.sampled_from([-INF, -2.0, -1.0, 0.0, 0.5, 1.0, INF]), min_size=2,
                                      max_size=2)))
        return f"hardtanh({catalog._float_text(lo)},{catalog._float_text(hi)})", False
    if name == "hardsigmoid":
        return f"hardsigmoid({draw(st.sampled_from([0.2, 1 / 6]))},{draw(st.sampled_from([0.5, -0.25]))})", False
    if name == "softplus":
        return f"softplus({draw(st.sampled_from([0.5, 1.0, 2.0]))},{draw(st.sampled_from([5.0, 20.0]))})", False
    return name, False


@st.composite
def _case(draw):
    op = draw(st.sampled_from(["GroupNormAct", "GemmGroupNormAct"]))
    G = draw(st.sampled_from([1, 2, 4]))
    C = G * draw(st.integers(1, 3))
    N = draw(st.sampled_from([0, 1, 2, 3]))
    if op == "GroupNormAct":
        spatial = draw(st.lists(st.integers(1, 3), max_size=3))
        if N and draw(st.integers(0, 9)) == 0:
            spatial = spatial + [0]  # S = 0
        shape = (N, C, *spatial[:3])
        K = None
    else:
        K = draw(st.integers(1, 5))
        shape = (N, K) if draw(st.booleans()) else (2, N, K)
    pre = [draw(_step(first=i == 0)) for i in range(draw(st.integers(0, 2)))]
    post = [draw(_step(first=False)) for _ in range(draw(st.integers(0, 3)))]
    n_extras = 2 if any(u for _, u in pre + post) else 0
    attrs = {"num_groups": G, "epsilon": draw(st.sampled_from([1e-5, 1e-3, 0.1])),
             "pre": ";".join(t for t, _ in pre), "post": ";".join(t for t, _ in post),
             "reduce": draw(st.sampled_from(list(catalog.REDUCE_CODES)))}
    if op == "GemmGroupNormAct":
        attrs["trans_b"] = draw(st.integers(0, 1))
    seed = draw(st.integers(0, 2**31 - 1))
    specials = draw(st.sampled_from([0, 0, 1, 2]))  # how many NaN / inf to sprinkle into X and the extras
    return op, attrs, shape, K, C, n_extras, seed, specials


def _arrays(op, attrs, shape, K, C, n_extras, seed, specials):
    rng = np.random.default_rng(seed)
    # |x| in [0.1, 3]: away from 0, so a leading rdiv stays well conditioned.
    x = (rng.uniform(0.1, 3.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    feeds = {"X": x}
    if op == "GemmGroupNormAct":
        w_shape = (C, K) if attrs["trans_b"] else (K, C)
        feeds["W"] = rng.uniform(-1, 1, w_shape).astype(np.float32)
        feeds["B"] = rng.uniform(-1, 1, C).astype(np.float32)
    feeds["gamma"] = rng.uniform(0.5, 1.5, C).astype(np.float32)
    feeds["beta"] = rng.uniform(-0.5, 0.5, C).astype(np.float32)
    for k in range(n_extras):
        feeds[f"extra_{k}"] = rng.choice(_EXTRA_VALUES, C).astype(np.float32)
    for _ in range(specials):
        target = rng.choice([n for n in feeds if n in ("X", "extra_0")])
        arr = feeds[target]
        if arr.size:
            arr.reshape(-1)[rng.integers(arr.size)] = rng.choice([np.nan, np.inf, -np.inf])
    return feeds


def _model(op: str, attrs: dict, rank: int, n_extras: int) -> onnx.ModelProto:
    fa = catalog.parse_attrs(op, attrs)
    fn = functions.build_function(op, fa, rank, 21, n_extras)
    names = functions.function_inputs(op, n_extras)
    node = helper.make_node(op, names, ["Y"], domain=catalog.DOMAIN, overload=fn.overload, **fa.onnx_attrs(op))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                                        for n in names], [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT,
                                                                                        None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(catalog.DOMAIN, 1)],
                          functions=[fn])
    m.ir_version = 10
    return m


def _reference(op, attrs, feeds) -> np.ndarray:
    a = catalog.parse_attrs(op, attrs)
    t = {k: torch.from_numpy(v.astype(np.float64)) for k, v in feeds.items()}
    extras = [t[k] for k in sorted(t) if k.startswith("extra_")]
    if op == "GroupNormAct":
        return catalog.group_norm_act_reference(t["X"], t["gamma"], t["beta"], extras, a).numpy()
    return catalog.gemm_group_norm_act_reference(t["X"], t["W"], t["B"], t["gamma"], t["beta"], extras, a).numpy()


def _assert_matches(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(np.isinf(got), inf, err_msg=f"{what}: inf positions")
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{what}: inf signs")
    finite = np.isfinite(want)
    if finite.any():
        scale = max(1.0, float(np.abs(want[finite]).max()))
        np.testing.assert_allclose(got[finite], want[finite], rtol=2e-3, atol=2e-3 * scale, err_msg=what)


@pytest.fixture(scope="module")
def ort_library():
    from fusedops import ort as fo_ort

    reason = fo_ort.unavailable_reason("CPUExecutionProvider")
    if reason:
        pytest.skip(f"fusedops ORT library unavailable: {reason}")
    return fo_ort


@settings(max_examples=int(os.environ.get("FUSEDOPS_FUZZ_EXAMPLES", 120)), **SETTINGS)
@given(case=_case())
def test_library_bodies_and_reference_agree(ort_library, case):
    op, attrs, shape, K, C, n_extras, seed, specials = case
    feeds = _arrays(*case)
    want = _reference(op, attrs, feeds)
    model = _model(op, attrs, len(shape), n_extras).SerializeToString()
    body = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    _assert_matches(body, want, f"function body, {op} {attrs} {shape}")
    lib_out = ort_library.session(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    _assert_matches(lib_out, want, f"ORT library, {op} {attrs} {shape}")
