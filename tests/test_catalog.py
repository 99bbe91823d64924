"""The catalog: chain grammar, attribute validation, reference semantics, and agreement with the C ABI header."""

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog as C

# The generated part of the C ABI header (fusedops.h includes it); tests/test_spec.py checks it is current.
HEADER = Path(__file__).resolve().parents[1] / "plugins" / "include" / "fusedops" / "fusedops_spec.h"


def test_step_codes_match_the_c_header():
    text = HEADER.read_text()
    header = {m.group(1).lower(): int(m.group(2)) for m in re.finditer(r"FUSEDOPS_STEP_([A-Z_]+)\s*=\s*(\d+)", text)}
    assert header == {k: v.code for k, v in C.STEP_KINDS.items()}
    reduces = {m.group(1).lower(): int(m.group(2))
               for m in re.finditer(r"FUSEDOPS_REDUCE_([A-Z]+)\s*=\s*(\d+)", text)}
    assert reduces == {("none" if k == "" else k): v for k, v in C.REDUCE_CODES.items()}
    assert f"FUSEDOPS_MAX_STEPS {C.MAX_STEPS}" in text and f"FUSEDOPS_MAX_EXTRAS {C.MAX_EXTRAS}" in text


@pytest.mark.parametrize("text, canonical", [
    ("", ""),
    ("relu", "relu"),
    ("swish", "silu"),
    ("clip(-1,1)", "hardtanh"),
    ("clip(0, inf)", "hardtanh(0,inf)"),
    ("leaky_relu(0.2);mul(2)", "leaky_relu(0.2);mul(2)"),
    ("add(@0); hardtanh(-1,1); mish", "add(@0);hardtanh;mish"),
    ("rsub(1.5);rdiv(@3);softplus(2,10)", "rsub(1.5);rdiv(@3);softplus(2,10)"),
    ("gelu;gelu_tanh;hardswish;hardsigmoid;sigmoid;tanh", "gelu;gelu_tanh;hardswish;hardsigmoid;sigmoid;tanh"),
    ("mul(0.1)", "mul(0.1)"),
])
def test_chain_round_trip(text, canonical):
    steps = C.parse_chain(text)
    assert C.chain_text(steps) == canonical
    assert C.parse_chain(C.chain_text(steps)) == steps


def test_float_text_round_trips_float32():
    gen = torch.Generator().manual_seed(0)
    for v in torch.randn(200, generator=gen).tolist():
        (s,) = C.parse_chain(f"mul({v!r})")
        (t,) = C.parse_chain(C.chain_text([s]))
        assert torch.tensor(t.operand, dtype=torch.float32) == torch.tensor(v, dtype=torch.float32)


@pytest.mark.parametrize("bad, message", [
    ("frobnicate", "unknown chain step 'frobnicate'"),
    ("add", "exactly one operand"),
    ("add(1,2)", "exactly one operand"),
    ("add(@x)", "bad extra-input reference"),
    ("add(@8)", "out of range"),
    ("leaky_relu(0.1,2)", "at most 1 parameter"),
    ("mul(1e)", "malformed number"),
    ("relu(", "malformed chain step"),
    (";".join(["relu"] * 17), "at most 16"),
])
def test_bad_chains_name_the_problem(bad, message):
    with pytest.raises(C.CatalogError, match=re.escape(message)):
        C.parse_chain(bad)


def test_parse_attrs_defaults_and_errors():
    a = C.parse_attrs("GroupNormAct", {"num_groups": 4})
    assert (a.epsilon, a.pre, a.post, a.reduce) == (1e-5, [], [], "")
    g = C.parse_attrs("GemmGroupNormAct", {"num_groups": 2, "trans_b": 0, "allow_tf32": 0, "reduce": "min"})
    assert (g.trans_b, g.allow_tf32, g.reduce) == (0, 0, "min")
    assert g.onnx_attrs("GemmGroupNormAct")["plugin_namespace"] == "fusedops"
    for attrs, msg in [({}, "num_groups' is required"), ({"num_groups": 0}, "positive"),
                       ({"num_groups": 2, "reduce": "median"}, "unknown reduce"),
                       ({"num_groups": 2, "epsilon": -1.0}, "epsilon"),
                       ({"num_groups": 2, "plugin_version": "2"}, "plugin_version"),
                       ({"num_groups": 2, "bogus": 1}, "unknown attribute 'bogus'")]:
        with pytest.raises(C.CatalogError, match=msg):
            C.parse_attrs("GroupNormAct", attrs)


def _rand(*shape, gen):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("shape", [(3, 8), (2, 8, 5), (2, 8, 3, 4), (1, 8, 2, 3, 2)])
def test_group_norm_act_reference_matches_torch_modules(shape):
    gen = torch.Generator().manual_seed(3)
    x = _rand(*shape, gen=gen)
    gamma, beta, e0 = _rand(8, gen=gen), _rand(8, gen=gen), _rand(8, gen=gen)
    a = C.parse_attrs("GroupNormAct", {"num_groups": 4, "pre": "add(@0);gelu", "post": "leaky_relu(0.2);mul(2)"})
    got = C.group_norm_act_reference(x, gamma, beta, [e0], a)
    bshape = (1, 8) + (1,) * (len(shape) - 2)
    want = F.group_norm(F.gelu(x + e0.reshape(bshape)), 4, gamma, beta, 1e-5)
    want = 2 * F.leaky_relu(want, 0.2)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("reduce", ["min", "max", "sum", "mean", "logsumexp"])
def test_gemm_reference_with_reduction(reduce):
    gen = torch.Generator().manual_seed(5)
    x, w, b = _rand(2, 3, 6, gen=gen), _rand(8, 6, gen=gen), _rand(8, gen=gen)
    gamma, beta = _rand(8, gen=gen), _rand(8, gen=gen)
    a = C.parse_attrs("GemmGroupNormAct", {"num_groups": 2, "reduce": reduce})
    got = C.gemm_group_norm_act_reference(x, w, b, gamma, beta, [], a)
    rows = F.group_norm(F.linear(x.reshape(6, 6), w, b), 2, gamma, beta)
    fn = {"min": lambda t: t.amin(1, True), "max": lambda t: t.amax(1, True), "sum": lambda t: t.sum(1, True),
          "mean": lambda t: t.mean(1, True), "logsumexp": lambda t: t.logsumexp(1, True)}[reduce]
    torch.testing.assert_close(got, fn(rows).reshape(2, 3, 1))
    assert C.output_shape("GemmGroupNormAct", (2, 3, 6), a, (8, 6)) == (2, 3, 1)
    # trans_b = 0 takes W as (K, C)
    a0 = C.parse_attrs("GemmGroupNormAct", {"num_groups": 2, "reduce": reduce, "trans_b": 0})
    torch.testing.assert_close(C.gemm_group_norm_act_reference(x, w.T.contiguous(), b, gamma, beta, [], a0), got)


def test_reference_rejects_bad_shapes():
    a = C.parse_attrs("GroupNormAct", {"num_groups": 3})
    x = torch.randn(2, 8, 4)
    with pytest.raises(C.CatalogError, match="C=8 is not divisible by num_groups=3"):
        C.group_norm_act_reference(x, torch.ones(8), torch.zeros(8), [], a)
    a = C.parse_attrs("GroupNormAct", {"num_groups": 2})
    with pytest.raises(C.CatalogError, match="gamma has 7 elements, expected C=8"):
        C.group_norm_act_reference(x, torch.ones(7), torch.zeros(8), [], a)
    g = C.parse_attrs("GemmGroupNormAct", {"num_groups": 2})
    with pytest.raises(C.CatalogError, match="K=4 features"):
        C.gemm_group_norm_act_reference(torch.randn(2, 4), torch.randn(8, 5), torch.zeros(8), torch.ones(8),
                                        torch.zeros(8), [], g)


def test_nan_propagates_through_relu_and_min_like_torch():
    a = C.parse_attrs("GroupNormAct", {"num_groups": 1, "post": "relu;hardtanh(-1,1)", "reduce": "min"})
    x = torch.randn(2, 4, 3)
    x[0, 1, 1] = float("nan")
    y = C.group_norm_act_reference(x, torch.ones(4), torch.zeros(4), [], a)
    assert torch.isnan(y[0]).all() and not torch.isnan(y[1]).any()
