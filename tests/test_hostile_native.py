"""Hostile values at the native core's C ABI: NaN / ±inf placed where the CPU kernels' reductions start, descriptors
with absurd sizes or codes, and the error-message helper (never cuts a UTF-8 character)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
import torch

from fusedops import catalog
from hostile_support import ROOT, groupnorm_desc, native_lib

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def abi():
    native_lib()
    from fusedops.plugins import abi as abi_mod

    return abi_mod


def test_message_helper_keeps_utf8_whole_and_quotes_like_the_catalog(tmp_path):
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler to build tests/native/message_check.cpp")
    exe = tmp_path / "message_check"
    subprocess.run(["c++", "-std=c++17", "-O1", "-I", str(ROOT / "plugins" / "csrc"),
                    str(ROOT / "tests" / "native" / "message_check.cpp"), "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout
    # The Python twin gives the same quoting for the ASCII cases the C++ check pins.
    assert catalog.quote("a'b\\c") == "'a\\'b\\\\c'"
    assert catalog.quote("x\ny\tz\r") == "'x\\ny\\tz\\r'"
    assert catalog.quote("\x01\x7f") == "'\\x01\\x7f'"
    assert catalog.quote("q" * 100) == "'" + "q" * 80 + "...'"


def _reference(x, a):
    C = x.shape[1]
    return catalog.group_norm_act_reference(x.double(), torch.ones(C, dtype=torch.float64),
                                            torch.zeros(C, dtype=torch.float64), [], a)


# A NaN (or +inf) produced by the post chain in the given channel; logsumexp used to drop a NaN that lay in the
# first channel group because the running maximum was still -inf when it was seen.
@pytest.mark.parametrize("channel", [0, 1, 5, 7])
@pytest.mark.parametrize("special", [NAN, INF, -INF])
@pytest.mark.parametrize("reduce", ["logsumexp", "min", "max", "sum", "mean"])
def test_cpu_reduce_with_a_special_value_in_any_channel(abi, reduce, special, channel):
    # post = add(@0) with extra 0 = special in one channel: every position of that channel becomes special.
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": 2, "post": "add(@0)", "reduce": reduce})
    gen = torch.Generator().manual_seed(channel * 31 + len(reduce))
    x = torch.randn(3, 8, 5, generator=gen)
    extra = torch.zeros(8)
    extra[channel] = special
    got = abi.groupnorm_act_cpu(x, torch.ones(8), torch.zeros(8), [extra], a)
    want = catalog.group_norm_act_reference(x.double(), torch.ones(8, dtype=torch.float64),
                                            torch.zeros(8, dtype=torch.float64), [extra.double()], a)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("rows_with_nan", [[0], [0, 2], [3]])
def test_gemm_logsumexp_keeps_a_nan_of_the_first_channels(abi, rows_with_nan):
    a = catalog.parse_attrs("GemmGroupNormAct", {"num_groups": 2, "post": "add(@0)", "reduce": "logsumexp"})
    gen = torch.Generator().manual_seed(sum(rows_with_nan) + 1)
    x, w, b = torch.randn(4, 6, generator=gen), torch.randn(8, 6, generator=gen), torch.randn(8, generator=gen)
    x[rows_with_nan, :] = NAN  # whole rows NaN: the NaN reaches channel 0 first
    got = abi.gemm_groupnorm_act_cpu(x, w, b, torch.ones(8), torch.zeros(8), [torch.zeros(8)], a)
    want = catalog.gemm_group_norm_act_reference(x.double(), w.double(), b.double(), torch.ones(8).double(),
                                                 torch.zeros(8).double(), [torch.zeros(8).double()], a)
    assert torch.isnan(got[rows_with_nan]).all()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, equal_nan=True)


def _gn_desc(abi, **kw):
    d = groupnorm_desc(abi, catalog.parse_attrs("GroupNormAct", {"num_groups": 4}), 2, 8, 3)
    for k, v in kw.items():
        setattr(d, k, v)
    return d


@pytest.mark.parametrize("fields,message", [
    ({"N": 2**62, "C": 2**40, "S": 2**40}, "tensor of N*C*S = 5.58e+42 elements is too large"),
    ({"N": -1}, "N=-1, C=8 and S=3 must all be positive"),
    ({"C": 2**40, "num_groups": 3}, "C=1099511627776 is not divisible by num_groups=3"),
    ({"num_groups": -2**31}, "num_groups must be positive, got -2147483648"),
    ({"epsilon": NAN}, "epsilon must be a finite non-negative number, got nan"),
    ({"reduce": -1}, "unknown reduce code -1"),
])
def test_descriptor_check_names_absurd_fields(abi, fields, message):
    d = _gn_desc(abi, **fields)
    err = ctypes.create_string_buffer(512)
    assert abi.load().fusedops_groupnorm_act_check(ctypes.byref(d), err, 512) == abi.ERR_INVALID_ARGUMENT
    assert err.value.decode() == message


@pytest.mark.parametrize("num_steps,op,operand,message", [
    (17, 7, -1, "pre chain has 17 steps; expected 0..16"),
    (-5, 7, -1, "pre chain has -5 steps; expected 0..16"),
    (1, 99, -1, "pre chain step 0 has unknown op code 99"),
    (1, 0, -1, "pre chain step 0 has unknown op code 0"),
    (1, 1, 8, "pre chain step 0 references extra input 8; expected -1 (scalar) or 0..7"),
    (1, 1, -2, "pre chain step 0 references extra input -2; expected -1 (scalar) or 0..7"),
])
def test_descriptor_check_names_a_corrupt_chain(abi, num_steps, op, operand, message):
    d = _gn_desc(abi)
    d.pre.num_steps = num_steps
    d.pre.steps[0].op = op
    d.pre.steps[0].operand = operand
    err = ctypes.create_string_buffer(512)
    assert abi.load().fusedops_groupnorm_act_check(ctypes.byref(d), err, 512) == abi.ERR_INVALID_ARGUMENT
    assert err.value.decode() == message


def test_num_extras_of_a_corrupt_operand_does_not_overflow(abi):
    # Regression of tests/native/fuzz_regressions/num_extras_operand_int32_max (signed overflow under UBSan).
    ch = abi.Chain()
    ch.num_steps = 1
    ch.steps[0].op, ch.steps[0].operand = 1, 2**31 - 1
    assert abi.load().fusedops_num_extras(ctypes.byref(ch), None) == 2**31 - 1
    ch.steps[0].operand = 7
    assert abi.load().fusedops_num_extras(ctypes.byref(ch), ctypes.byref(ch)) == 8
