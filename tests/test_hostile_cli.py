"""Hostile command lines and API arguments (one line, exit 2 / a UsageError naming the argument, checked before any
work), and torch.compile of the fused drop-in models with a second instance of other constants."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fusedops
from fusedops.errors import FusedopsError, UsageError
from fusedops.models import REGISTRY, get_entry
from hostile_support import cli, run_cli


@pytest.mark.parametrize("args,message", [
    (["verify", "1", "--batch", "-1"], "verify: argument --batch: must be a positive integer, got -1"),
    (["verify", "1", "--batch", "0"], "verify: argument --batch: must be a positive integer, got 0"),
    (["verify", "1", "--batch", "two"], "verify: argument --batch: must be a positive integer, got 'two'"),
    (["verify", "1", "--batch", "1e3"], "verify: argument --batch: must be a positive integer, got '1e3'"),
    (["demo", "--repeats", "0"], "demo: argument --repeats: must be a positive integer, got 0"),
    (["demo", "--repeats", "-5"], "demo: argument --repeats: must be a positive integer, got -5"),
    (["verify", "1", "--backend", "cuda-magic"],
     "verify: argument --backend: invalid choice: 'cuda-magic' (choose from ort-cpu-functions, ort-cpu, ort-cuda, "
     "torch-cpu, torch-cuda, trt)"),
    (["export", "1", "--out", "m.onnx", "--size", "huge"],
     "export: argument --size: invalid choice: 'huge' (choose from small, bench)"),
    (["export", "1"], "export: the following arguments are required: --out"),
    (["fuse", "only-one.onnx"], "fuse: the following arguments are required: output"),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate' (choose from export, fuse, demo, verify, "
                     "bench, build-native, build, serve, repo, loadtest)"),
    ([], "the following arguments are required: COMMAND"),
    (["fuse", "a.onnx", "b.onnx", "--forse"], "unrecognized arguments: --forse"),
])
def test_bad_command_lines_are_one_line(capsys, args, message):
    rc, stdout, err = cli(capsys, *args)
    assert (rc, stdout) == (2, "")
    # argparse quotes the choices up to Python 3.12.7 ('a', 'b') and not from 3.12.8 (a, b): both are fine.
    if "(choose from " in err:
        head, choices = err.split("(choose from ", 1)
        err = head + "(choose from " + choices.replace("'", "")
    assert err == message


@pytest.mark.parametrize("args,message", [
    (["verify", "resnet", "--backend", "ort-cpu-functions"],
     "unknown model 'resnet'"),
    (["export", "9", "--out", "m.onnx"], "unknown model '9'"),
])
def test_unknown_models_are_named(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli(capsys, *args)
    assert rc == 2 and err.startswith(message)
    assert list(tmp_path.iterdir()) == []


def test_help_still_works(capsys):
    rc, stdout, _ = cli(capsys, "fuse", "--help")
    assert rc == 0 and stdout.startswith("usage: fusedops fuse")


@pytest.mark.parametrize("call,message", [
    (lambda: fusedops.verify("1", backend="ort-cpu-functions", batch=0),
     "batch must be a positive integer (or None for the model's default), got 0"),
    (lambda: fusedops.verify("1", backend="ort-cpu-functions", batch=-1),
     "batch must be a positive integer (or None for the model's default), got -1"),
    (lambda: fusedops.verify("1", backend="ort-cpu-functions", batch=True),
     "batch must be a positive integer (or None for the model's default), got True"),
    (lambda: fusedops.verify("1", backend="ort-cpu-functions", batch=2.5),
     "batch must be a positive integer (or None for the model's default), got 2.5"),
    (lambda: fusedops.verify("1", backend="ort-cpu-functions", size="medium"),
     "size must be 'small' or 'bench', got 'medium'"),
    (lambda: fusedops.verify("1", backend="ort-cpu-functions", seed=-3),
     "seed must be a non-negative integer, got -3"),
    (lambda: fusedops.verify(None, backend="ort-cpu-functions"), "model must be a model key or number, got NoneType"),
    (lambda: fusedops.verify("1", backend=["ort-cpu"]),
     "unknown backend ['ort-cpu']; choose one of: ort-cpu-functions, ort-cpu, ort-cuda, torch-cpu, torch-cuda, trt"),
    (lambda: fusedops.demo(repeats=0), "repeats must be a positive integer, got 0"),
    (lambda: fusedops.demo(repeats=3.0), "repeats must be a positive integer, got 3.0"),
    (lambda: fusedops.demo(models="1"), "models must be a list of names (or None for all), got '1'"),
    (lambda: fusedops.demo(size="tiny"), "size must be 'small', 'bench' or None, got 'tiny'"),
    (lambda: fusedops.demo(force=1), "force must be True or False, got 1"),
    (lambda: fusedops.export("1", "m.onnx", size="large"), "size must be 'small' or 'bench', got 'large'"),
    (lambda: fusedops.export("1", "m.onnx", dynamic_batch="no"), "dynamic_batch must be True or False, got 'no'"),
    (lambda: fusedops.export(3.5, "m.onnx"), "model must be a model key or number, got float"),
])
def test_api_arguments_are_checked_before_any_work(call, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("fusedops.exporter_api.export_fused_model", lambda *a, **k: pytest.fail("exported"))
    with pytest.raises(UsageError) as ei:
        call()
    assert str(ei.value) == message
    assert list(tmp_path.iterdir()) == []


def test_api_functions_stay_functions_when_called_twice():
    """The bug: the first call imported ``fusedops.demo`` (the submodule), which replaced the function, and the
    second call failed with "'module' object is not callable". No submodule has those names now; each function is
    called twice (with an argument each checks first) after the modules that run it are imported."""
    import importlib
    import types

    for module in ("fusedops.workflows.demo", "fusedops.workflows.verify", "fusedops.benchmark.gpu"):
        importlib.import_module(module)
    for _ in range(2):
        with pytest.raises(UsageError, match="repeats must be a positive integer"):
            fusedops.demo(repeats=0)
        with pytest.raises(UsageError, match="unknown backend 'nope'"):
            fusedops.verify("1", backend="nope")
        with pytest.raises(FusedopsError):  # no CUDA: "needs a CUDA GPU"; with one: the repeats check
            fusedops.bench(repeats=0)
    package = Path(fusedops.__file__).parent
    for name in ("demo", "verify", "bench"):
        assert isinstance(getattr(fusedops, name), types.FunctionType)
        # no module of that name in the package (find_spec would also see the checkout's top-level folders, e.g.
        # bench/, which an editable install exposes under fusedops but no wheel ships)
        assert not (package / f"{name}.py").exists() and not (package / name).is_dir(), name


def test_no_traceback_in_a_real_process(tmp_path):
    # In-process tests see the exception classes; this one sees what a user sees.
    (tmp_path / "garbage.onnx").write_bytes(b"\x00\x01 garbage")
    rc, stdout, stderr = run_cli("fuse", tmp_path / "garbage.onnx", tmp_path / "out.onnx")
    assert rc == 2 and "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        f"fusedops: error: {fusedops.catalog.quote(str(tmp_path / 'garbage.onnx'), limit=200)} is not an ONNX file "
        f"(protobuf could not parse it: DecodeError)"]


# ---------------------------------------------------------------------------------------------------------------------
# torch.compile: a second instance with other constants compiles with fullgraph=True
# ---------------------------------------------------------------------------------------------------------------------

def _other_constants(model: torch.nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.GroupNorm):
            m.eps = 1e-3
        if isinstance(m, torch.nn.LeakyReLU):
            m.negative_slope = 0.2
        if isinstance(m, torch.nn.Hardtanh):
            m.min_val, m.max_val = -0.5, 0.5
    if hasattr(model, "refresh_chains"):
        model.refresh_chains()


@pytest.mark.parametrize("key", list(REGISTRY))
def test_second_instance_with_other_constants_compiles_fullgraph(key):
    entry = get_entry(key)
    first = entry.build("small", cls_name="ModelNew", seed=0)
    second = entry.build("small", cls_name="ModelNew", seed=1)
    _other_constants(second)
    ref = entry.build("small", seed=1)
    ref.load_state_dict(second.state_dict())
    _other_constants(ref)
    (x,) = entry.inputs("small", batch=3, generator=torch.Generator().manual_seed(4))
    torch._dynamo.reset()
    with torch.no_grad():
        for m in (first, second):
            compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
            torch.testing.assert_close(compiled(x), m(x), rtol=0, atol=0)
        torch.testing.assert_close(second(x), ref(x), rtol=1e-5, atol=1e-5)  # the new constants are used


def test_changed_constants_need_refresh_chains_and_then_apply():
    entry = get_entry("1")
    m = entry.build("small", cls_name="ModelNew", seed=0)
    before = m.post_chain
    m.leaky_relu.negative_slope = 0.3
    m.refresh_chains()
    assert before == "leaky_relu(0.01);mul(2)" and m.post_chain == "leaky_relu(0.3);mul(2)"
