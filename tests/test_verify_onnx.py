"""``fusedops verify PATH.onnx`` (fusedops/workflows/verify_onnx.py): an unfused model fused here and a fused model
each pass against plain ONNX Runtime; a fused node the library computes differently from its function body, and a
PyTorch module that computes something else, fail with exit 1 naming the output; bad inputs give one error line;
the user's files are never changed."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import fusedops
from fusedops.workflows import verify_onnx
from hostile_support import cli, gn_model, save
from native_support import require_native_build

SCALE = np.linspace(0.5, 1.5, 8)  # gn_model's scale and bias for C=8, opset 21
BIAS = np.linspace(-0.1, 0.1, 8)


@pytest.fixture(scope="module", autouse=True)
def library():
    """The fusedops ORT library, built here when missing (skip, with the reason, where it cannot be)."""
    from fusedops import ort as fo_ort

    if fo_ort.unavailable_reason() is None:
        return
    require_native_build("libfusedops_ort.so")
    fo_ort.build_library(cuda="auto", fetch_deps=False)


def gn_swish_model(x_shape=("N", 8, 5)) -> onnx.ModelProto:
    """GroupNormalization(8 channels, 4 groups) then x·sigmoid(x): the fuser makes it one GroupNormAct(post=silu)."""
    m = gn_model(C=8, G=4, x_shape=list(x_shape))
    m.graph.node[0].output[0] = "gn"
    m.graph.node.extend([helper.make_node("Sigmoid", ["gn"], ["s"]), helper.make_node("Mul", ["gn", "s"], ["Y"])])
    return m


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def unfused(tmp_path) -> Path:
    return save(gn_swish_model(), tmp_path / "gn_swish.onnx")


@pytest.fixture
def fused(tmp_path, unfused) -> Path:
    return Path(fusedops.fuse(str(unfused), str(tmp_path / "gn_swish.fused.onnx")))


def test_unfused_model_is_fused_here_and_passes(capsys, tmp_path, unfused):
    before = digest(tmp_path)
    rc, out, err = cli(capsys, "verify", unfused)
    assert (rc, err) == (0, "")
    assert "1 fusedops node(s), fused here" in out and "all outputs match" in out and "FAIL" not in out
    assert digest(tmp_path) == before  # nothing written beside the input, the input unchanged


def test_fused_model_passes_against_its_function_bodies(tmp_path, fused):
    before = digest(tmp_path)
    r = fusedops.verify(fused, seed=5)
    assert isinstance(r, verify_onnx.OnnxVerifyResult)
    assert r.ok and not r.fused_here and r.fused_nodes == 1 and r.library_kernel_calls > 0
    assert (r.atol, r.rtol) == (1e-4, 1e-4) and r.inputs == {"X": ((2, 8, 5), "float32")}
    (c,) = r.comparisons
    assert [(o.name, o.shape) for o in c.outputs] == [("Y", (2, 8, 5))]
    assert 0 < c.outputs[0].max_abs_err < 1e-4  # a real difference (two implementations), within tolerance
    assert digest(tmp_path) == before


def test_library_computing_other_than_the_function_body_fails(capsys, tmp_path, fused):
    """The fused node says post=relu while its function body still computes silu: the library's answer differs."""
    m = onnx.load(str(fused))
    (node,) = [n for n in m.graph.node if n.domain == "fusedops"]
    next(a for a in node.attribute if a.name == "post").s = b"relu"
    tampered = save(m, tmp_path / "tampered.onnx")
    rc, out, err = cli(capsys, "verify", tampered)
    assert (rc, err) == (1, "")
    row = next(line for line in out.splitlines() if line.startswith("│ Y "))
    assert "FAIL" in row and "no" in row and "verify failed" in out


def test_model_with_nothing_to_fuse_says_so(capsys, tmp_path):
    graph = helper.make_graph([helper.make_node("Sigmoid", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])])
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10),
                tmp_path / "sigmoid.onnx")
    rc, out, _ = cli(capsys, "verify", path)
    assert rc == 0 and "0 fusedops node(s)" in out and "nothing was fused" in out


def test_symbolic_dimension_needs_a_value(capsys, tmp_path):
    path = save(gn_swish_model(("N", 8, "L")), tmp_path / "seq.onnx")
    rc, _, err = cli(capsys, "verify", path)
    assert rc == 2
    assert err == "input 'X' dimension 2 (L) is symbolic and has no value; give the input's shape with --shapes X:2x8xD"
    rc, out, _ = cli(capsys, "verify", path, "--shapes", "X:3x8x7", "--batch", "4")
    assert rc == 0 and "X float32 3x8x7" in out  # --shapes gives the whole shape, batch included
    rc, _, err = cli(capsys, "verify", path, "--shapes", "X:3x9x7")
    assert (rc, err) == (2, "--shapes gives input 'X' dimension 1 = 9; the model fixes it at 8")
    rc, _, err = cli(capsys, "verify", path, "--shapes", "Z:1x2")
    assert (rc, err) == (2, "--shapes names unknown input(s) Z; the model's inputs are X")


def test_non_float_input_is_refused(capsys, tmp_path):
    m = gn_swish_model()
    m.graph.input.append(helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"]))
    rc, _, err = cli(capsys, "verify", save(m, tmp_path / "ids.onnx"))
    assert (rc, err) == (2, "input 'ids' is int64; verify makes random inputs for float32, float16 and bfloat16 "
                            "inputs only")


TORCH_MODULE = f"""
import torch

class GroupNormSwish(torch.nn.Module):
    def __init__(self, post):
        super().__init__()
        self.gn = torch.nn.GroupNorm(4, 8, eps=1e-5)
        with torch.no_grad():
            self.gn.weight.copy_(torch.tensor({SCALE.tolist()}))
            self.gn.bias.copy_(torch.tensor({BIAS.tolist()}))
        self.post = post

    def forward(self, x):
        return self.post(self.gn(x))

def same():
    return GroupNormSwish(torch.nn.functional.silu)

def other():
    return GroupNormSwish(torch.relu)
"""


@pytest.mark.parametrize("callable_,rc", [("same", 0), ("other", 1)])
def test_torch_module_is_a_second_reference(capsys, tmp_path, monkeypatch, unfused, callable_, rc):
    name = f"verify_torch_{callable_}"  # a module name of its own per case: sys.modules keeps imported ones
    (tmp_path / f"{name}.py").write_text(TORCH_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, name, raising=False)
    before = digest(tmp_path)
    got_rc, out, _ = cli(capsys, "verify", unfused, "--torch", f"{name}:{callable_}")
    assert got_rc == rc
    tables = out.split("vs the PyTorch module")
    assert len(tables) == 2 and "FAIL" not in tables[0]  # the ONNX comparison passes either way
    row = next(line for line in tables[1].splitlines() if line.startswith("│ Y "))
    assert ("pass" in row) == (rc == 0) and ("FAIL" in row) == (rc == 1)
    assert digest(tmp_path) == before


@pytest.mark.parametrize("spec,message", [
    ("nocolon", "--torch must be MODULE:CALLABLE (e.g. mymodels:build), got 'nocolon'"),
    ("no_such_module_here:build", "--torch: cannot import module 'no_such_module_here' (ModuleNotFoundError: No "
                                  "module named 'no_such_module_here')"),
    ("math:pi", "--torch: module 'math' has no callable 'pi'"),
    ("math:floor", "--torch: math:floor() raised TypeError: "),  # the rest of the text varies by Python version
    ("fractions:Fraction", "--torch: fractions:Fraction() returned Fraction, not a torch.nn.Module"),
])
def test_bad_torch_argument_is_one_line(capsys, unfused, spec, message):
    rc, _, err = cli(capsys, "verify", unfused, "--torch", spec)
    assert rc == 2 and err.startswith(message)


@pytest.mark.parametrize("args,message", [
    (["--backend", "trt"], "an ONNX file is verified on ort-cpu or ort-cuda, got backend 'trt'"),
    (["--shapes", "X"], "shapes: bad shape 'X': expected NAME:D0xD1x..."),
    (["--seed", "-1"], "--seed must be a non-negative integer, got -1"),
])
def test_bad_arguments_for_an_onnx_file(capsys, unfused, args, message):
    rc, _, err = cli(capsys, "verify", unfused, *args)
    assert (rc, err) == (2, message)


def test_onnx_only_flags_are_refused_for_a_model_key(capsys):
    rc, _, err = cli(capsys, "verify", "1", "--torch", "m:f")
    assert (rc, err) == (2, "--torch applies to an ONNX file (PATH.onnx), not to model key '1'")


def test_missing_onnx_file_is_named(capsys, tmp_path):
    rc, _, err = cli(capsys, "verify", tmp_path / "absent.onnx")
    assert rc == 2 and err.startswith("input file ") and err.endswith("absent.onnx' does not exist")


def test_compare_outputs_names_shape_and_nan_mismatches():
    a = np.ones((2, 3), np.float32)
    nan = a.copy()
    nan[0, 0] = np.nan
    checks = verify_onnx.compare_outputs(["y", "z", "w"], [a, nan, a], [a[:1], a, a + 1e-6], 1e-4, 1e-4)
    assert [(c.name, c.ok, c.note) for c in checks] == [
        ("y", False, "shape (2, 3) != reference (1, 3)"), ("z", False, "NaN in the candidate only"), ("w", True, "")]
    assert checks[2].max_abs_err == pytest.approx(1e-6, rel=0.1)


def test_exported_reference_model_passes_against_onnx_runtime_and_its_pytorch_module(tmp_path, monkeypatch):
    """Model 1 (GEMM + GroupNorm + activations) exported unfused at size small: fused here, it matches plain ONNX
    Runtime and the PyTorch module it was exported from (the same weights: build() as the exporter calls it)."""
    path = fusedops.export("1", str(tmp_path / "model1.onnx"), size="small", fuse=False)
    (tmp_path / "model1_module.py").write_text(
        "from fusedops.models import get_entry\n\ndef build():\n    return get_entry('1').build('small')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "model1_module", raising=False)
    before = digest(tmp_path)
    r = fusedops.verify(path, torch_module="model1_module:build", batch=3)
    assert r.ok and r.fused_here and r.fused_nodes >= 1 and r.library_kernel_calls > 0
    assert [c.reference for c in r.comparisons] == ["the input model on plain onnxruntime (CPU)",
                                                    "the PyTorch module (float32, CPU)"]
    assert all(o.shape[0] == 3 for c in r.comparisons for o in c.outputs)
    assert digest(tmp_path) == before
