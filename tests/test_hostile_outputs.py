"""Hostile output and input paths: nothing the user has is replaced without --force, directories and devices are
never replaced, the input never; long names, read-only folders, a parent that is a file and a full disk end in one
line naming the problem; export checks its output before exporting; inputs that cannot be read say why (missing,
folder, FIFO, permission, external data outside the folder or missing)."""

from __future__ import annotations

import errno
import os
import resource
import stat
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

import fusedops
from fusedops import exporter_api, input_files, safe_output
from fusedops.errors import InputFileError, OutputFileError, UsageError
from hostile_support import cli, gn_model, run_cli, save

EXISTS = "exists; pass --force (force=True) to replace it"


@pytest.fixture()
def src(tmp_path):
    return save(gn_model(), tmp_path / "in.onnx")


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".fusedops-"))


def _q(path) -> str:
    return fusedops.catalog.quote(str(path), limit=200)


# ---------------------------------------------------------------------------------------------------------------------
# What is at the output path
# ---------------------------------------------------------------------------------------------------------------------

def test_existing_file_is_kept_without_force_and_replaced_with_it(capsys, src, tmp_path):
    out = tmp_path / "out.onnx"
    out.write_bytes(b"user data")
    rc, _, err = cli(capsys, "fuse", src, out)
    assert (rc, err) == (2, f"output {_q(out)} {EXISTS}") and out.read_bytes() == b"user data"
    rc, stdout, _ = cli(capsys, "fuse", src, out, "--force")
    assert rc == 0 and stdout.strip().endswith(f"; wrote {out}")
    assert onnx.load(str(out)).graph.node[0].op_type == "GroupNormAct"
    assert _leftovers(tmp_path) == []


def test_dangling_symlink_is_not_absent(capsys, src, tmp_path):
    link, target = tmp_path / "out.onnx", tmp_path / "elsewhere" / "target.onnx"
    link.symlink_to(target)
    rc, _, err = cli(capsys, "fuse", src, link)
    assert rc == 2 and err == (f"output {_q(link)} is a symbolic link (dangling) to {_q(target)}; pass --force "
                               f"(force=True) to replace the link (its target is left alone)")
    assert link.is_symlink() and not target.exists()
    rc, _, _ = cli(capsys, "fuse", src, link, "--force")  # the link itself is replaced, nothing is created there
    assert rc == 0 and not link.is_symlink() and link.is_file() and not target.parent.exists()


def test_symlink_to_a_user_file_replaces_the_link_never_the_target(capsys, src, tmp_path):
    target = tmp_path / "precious.onnx"
    target.write_bytes(b"precious")
    link = tmp_path / "out.onnx"
    link.symlink_to(target)
    rc, _, err = cli(capsys, "fuse", src, link)
    assert rc == 2 and err.startswith(f"output {_q(link)} is a symbolic link to {_q(target)}; pass --force")
    assert cli(capsys, "fuse", src, link, "--force")[0] == 0
    assert target.read_bytes() == b"precious" and not link.is_symlink()


def test_directory_is_refused_even_with_force(capsys, src, tmp_path):
    d = tmp_path / "out.onnx"
    d.mkdir()
    (d / "keep").write_text("x")
    for extra in ([], ["--force"]):
        rc, _, err = cli(capsys, "fuse", src, d, *extra)
        assert (rc, err) == (2, f"output {_q(d)} is a directory; refusing to replace it")
    assert (d / "keep").read_text() == "x"


def test_device_node_is_refused_even_with_force(capsys, src):
    if not os.path.exists(os.devnull) or not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        pytest.skip("no character device at os.devnull on this system")
    rc, _, err = cli(capsys, "fuse", src, os.devnull, "--force")
    assert (rc, err) == (2, f"output {_q(os.devnull)} is a character device; refusing to replace it")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_fifo_is_refused_without_blocking(capsys, src, tmp_path):
    fifo = tmp_path / "out.onnx"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    rc, _, err = cli(capsys, "fuse", src, fifo, "--force")
    assert (rc, err) == (2, f"output {_q(fifo)} is a FIFO (named pipe); refusing to replace it")
    assert time.monotonic() - t0 < 60 and stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("how", ["same path", "dot path", "hard link"])
def test_the_input_is_never_the_output(capsys, src, tmp_path, how):
    if how == "same path":
        out = src
    elif how == "dot path":
        out = tmp_path / "." / src.name
    else:
        out = tmp_path / "hardlink.onnx"
        os.link(src, out)
    before = src.read_bytes()
    rc, _, err = cli(capsys, "fuse", src, out, "--force")
    assert (rc, err) == (2, f"output {_q(out)} is the input file; refusing to overwrite the input")
    assert src.read_bytes() == before


def test_external_data_file_of_the_input_is_never_the_output(capsys, tmp_path):
    m = gn_model(C=64, G=4)
    onnx.save(m, str(tmp_path / "in.onnx"), save_as_external_data=True, location="in.data", size_threshold=0)
    before = (tmp_path / "in.data").read_bytes()
    rc, _, err = cli(capsys, "fuse", tmp_path / "in.onnx", tmp_path / "in.data", "--force")
    assert (rc, err) == (2, f"output {_q(tmp_path / 'in.data')} is the input file; refusing to overwrite the input")
    assert (tmp_path / "in.data").read_bytes() == before


# ---------------------------------------------------------------------------------------------------------------------
# Names and folders
# ---------------------------------------------------------------------------------------------------------------------

def test_long_but_legal_name_works(capsys, src, tmp_path):
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    out = tmp_path / ("n" * (name_max - 5) + ".onnx")  # exactly NAME_MAX bytes: the temporary name is separate
    rc, _, _ = cli(capsys, "fuse", src, out)
    assert rc == 0 and out.is_file() and _leftovers(tmp_path) == []


def test_name_longer_than_the_file_system_allows(capsys, src, tmp_path):
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    name = "n" * (name_max - 4) + ".onnx"
    rc, _, err = cli(capsys, "fuse", src, tmp_path / name)
    assert (rc, err) == (2, f"output file name {_q(name)} is {name_max + 1} bytes long; the file system allows at "
                            f"most {name_max}")


def test_missing_folder_and_parent_that_is_a_file(capsys, src, tmp_path):
    rc, _, err = cli(capsys, "fuse", src, tmp_path / "no" / "such" / "out.onnx")
    assert (rc, err) == (2, f"output folder {_q(tmp_path / 'no' / 'such')} does not exist")
    (tmp_path / "afile").write_text("x")
    rc, _, err = cli(capsys, "fuse", src, tmp_path / "afile" / "out.onnx")
    assert (rc, err) == (2, f"output folder {_q(tmp_path / 'afile')} is a file, not a folder")
    out = tmp_path / "afile" / "sub" / "out.onnx"
    rc, _, err = cli(capsys, "fuse", src, out)
    assert (rc, err) == (2, f"output path {_q(out)}: a parent of it is a file, not a folder")


@pytest.mark.parametrize("path,message", [
    ("", "output path is empty"),
    ("   ", "output path is empty"),
    ("sub/", "output path 'sub/' names a folder, not a file"),
    ("out\x00.onnx", "output path 'out\\x00.onnx' contains a NUL character"),
])
def test_unusable_output_names(src, path, message, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputFileError) as ei:
        fusedops.fuse(str(src), path)
    assert str(ei.value) == message


def test_a_name_with_a_newline_stays_one_line(capsys, src, tmp_path):
    out = tmp_path / "a\nb.onnx"
    out.write_bytes(b"x")
    rc, _, err = cli(capsys, "fuse", src, out)
    assert rc == 2 and err == f"output {_q(out)} {EXISTS}" and "\\n" in err


def test_read_only_folder_is_found_before_the_work(src, tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(safe_output.tempfile, "mkstemp", refuse)
    monkeypatch.setattr("fusedops.exporter.fuse.fuse_model", lambda m: pytest.fail("fused before the check"))
    out = tmp_path / "out.onnx"
    with pytest.raises(OutputFileError) as ei:
        fusedops.fuse(str(src), str(out))
    assert str(ei.value) == f"cannot create output {_q(out)}: permission denied in folder {_q(tmp_path)}"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores folder permission bits; the monkeypatched twin above covers it")
def test_read_only_folder_for_real(capsys, src, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc, _, err = cli(capsys, "fuse", src, ro / "out.onnx")
        assert (rc, err) == (2, f"cannot create output {_q(ro / 'out.onnx')}: permission denied in folder {_q(ro)}")
    finally:
        ro.chmod(0o700)


# ---------------------------------------------------------------------------------------------------------------------
# Write failures
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code,text", [(errno.ENOSPC, "no space left on the device"),
                                       (errno.EDQUOT, "the disk quota is exceeded"),
                                       (errno.EIO, os.strerror(errno.EIO))])
def test_write_failure_leaves_nothing_and_says_why(src, tmp_path, monkeypatch, code, text):
    out = tmp_path / "out.onnx"
    out.write_bytes(b"old")
    real_write = os.write

    def failing_write(fd, data):
        if fd > 2:
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    monkeypatch.setattr(safe_output.os, "write", failing_write)
    with pytest.raises(OutputFileError) as ei:
        fusedops.fuse(str(src), str(out), force=True)
    assert str(ei.value).startswith(f"cannot write output {_q(out)}: {text} (wrote nothing; ")
    assert out.read_bytes() == b"old" and _leftovers(tmp_path) == []


def test_file_size_limit_in_a_real_process(src, tmp_path):
    # RLIMIT_FSIZE makes write() fail with EFBIG (Python ignores SIGXFSZ): a real "disk full" for this process.
    out = tmp_path / "out.onnx"
    limit = 2048

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    rc, stdout, stderr = run_cli("fuse", src, out, preexec_fn=small_files,
                                 env_extra={"PYTHONDONTWRITEBYTECODE": "1"})
    assert rc == 2, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        f"fusedops: error: cannot write output {_q(out)}: the file size limit was exceeded (wrote nothing; ")
    assert not out.exists() and _leftovers(tmp_path) == []


def test_output_that_appears_during_the_work_is_not_replaced(src, tmp_path, monkeypatch):
    out = tmp_path / "out.onnx"
    from fusedops import exporter_api as fuse_mod  # fuse_file calls the fuser through its module-level import

    real = fuse_mod.fuse_ir  # the work fusedops.fuse does between checking and writing its output

    def slow_fuse(model):
        out.write_bytes(b"written meanwhile")
        return real(model)

    monkeypatch.setattr(fuse_mod, "fuse_ir", slow_fuse)
    with pytest.raises(OutputFileError) as ei:
        fusedops.fuse(str(src), str(out))
    assert str(ei.value) == f"output {_q(out)} {EXISTS}"
    assert out.read_bytes() == b"written meanwhile" and _leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------------------
# export checks its output before exporting; demo, bench and verify use the same rules
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make,message", [
    (lambda p: p.mkdir(), "output {q} is a directory; refusing to replace it"),
    (lambda p: p.write_bytes(b"x"), "output {q} " + EXISTS),
    (lambda p: p.symlink_to(p.parent / "nowhere"), None),
])
def test_export_checks_the_output_before_exporting(capsys, tmp_path, monkeypatch, make, message):
    out = tmp_path / "m.onnx"
    make(out)
    monkeypatch.setattr(exporter_api, "export_fused_model", lambda *a, **k: pytest.fail("exported first"))
    rc, _, err = cli(capsys, "export", "1", "--out", out)
    assert rc == 2
    if message:
        assert err == message.format(q=_q(out))
    else:
        assert err.startswith(f"output {_q(out)} is a symbolic link (dangling)")


def test_demo_asks_for_force_before_replacing_files(capsys, tmp_path, monkeypatch):
    # patched where demo calls it (its module-level import): patching fusedops.pipeline left this test's stub in a
    # demo module first imported here, and a later demo test in this file failed "exported"
    monkeypatch.setattr("fusedops.workflows.demo.export_unfused_and_fused", lambda *a, **k: pytest.fail("exported"))
    key = fusedops.models.get_entry("1").key
    (tmp_path / f"{key}.small.onnx").write_bytes(b"mine")
    rc, _, err = cli(capsys, "demo", "--models", "1", "--backends", "ort-cpu-functions", "--size", "small",
                     "--out-dir", tmp_path)
    assert (rc, err) == (2, f"output {_q(tmp_path / (key + '.small.onnx'))} {EXISTS}")
    assert (tmp_path / f"{key}.small.onnx").read_bytes() == b"mine"


def test_demo_out_dir_that_is_a_file(capsys, tmp_path):
    f = tmp_path / "results"
    f.write_text("x")
    rc, _, err = cli(capsys, "demo", "--models", "1", "--out-dir", f)
    assert (rc, err) == (2, f"output folder {_q(f)} is a file, not a folder")
    assert f.read_text() == "x"


def test_demo_with_force_replaces_its_earlier_files(capsys, tmp_path):
    key = fusedops.models.get_entry("1").key
    (tmp_path / "demo.json").write_text("old")
    rc, _, _ = cli(capsys, "demo", "--models", "1", "--backends", "ort-cpu-functions", "--size", "small",
                   "--repeats", "1", "--out-dir", tmp_path, "--force")
    assert rc == 0 and (tmp_path / "demo.json").read_text() != "old"
    assert (tmp_path / f"{key}.small.fused.onnx").is_file() and _leftovers(tmp_path) == []


def test_bench_checks_its_out_dir_before_timing(tmp_path, monkeypatch):
    import importlib

    bench = importlib.import_module("fusedops.benchmark.gpu")
    from fusedops.plugins import torch_ops

    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch_ops, "cuda_kernels_available", lambda: (True, ""))
    monkeypatch.setattr(bench, "_bench_model", lambda *a, **k: pytest.fail("timed before the check"))
    (tmp_path / "bench.json").write_text("previous run")
    with pytest.raises(OutputFileError) as ei:
        bench.run_bench(models=["1"], out_dir=str(tmp_path), quiet=True)
    assert str(ei.value) == f"output {_q(tmp_path / 'bench.json')} {EXISTS}"
    (tmp_path / "bench.json").unlink()
    (tmp_path / "bench.png").mkdir()
    with pytest.raises(OutputFileError) as ei:
        bench.run_bench(models=["1"], out_dir=str(tmp_path), quiet=True, force=True)
    assert str(ei.value) == f"output {_q(tmp_path / 'bench.png')} is a directory; refusing to replace it"


def test_verify_workdir_keeps_user_files(tmp_path):
    key = fusedops.models.get_entry("4").key
    (tmp_path / f"{key}.small.fused.onnx").write_bytes(b"mine")
    with pytest.raises(OutputFileError) as ei:
        fusedops.verify("4", backend="ort-cpu-functions", workdir=str(tmp_path))
    assert str(ei.value) == f"output {_q(tmp_path / (key + '.small.fused.onnx'))} {EXISTS}"


def test_api_raises_the_cli_text_as_a_fusedops_error_subclass(capsys, src, tmp_path):
    out = tmp_path / "out.onnx"
    out.write_bytes(b"x")
    with pytest.raises(OutputFileError) as ei:
        fusedops.fuse(str(src), str(out))
    assert cli(capsys, "fuse", src, out)[2] == str(ei.value)
    with pytest.raises(UsageError, match="force must be True or False, got 'yes'"):
        fusedops.fuse(str(src), str(out), force="yes")


# ---------------------------------------------------------------------------------------------------------------------
# Inputs that cannot be read say why
# ---------------------------------------------------------------------------------------------------------------------

def _make_input(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"{kind}.onnx"
    if kind == "folder":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "garbage":
        p.write_bytes(b"\xff\xff\xff not protobuf")
    elif kind == "dangling":
        p.symlink_to(tmp_path / "gone.onnx")
    elif kind == "under-a-file":
        (tmp_path / "afile").write_text("x")
        p = tmp_path / "afile" / "m.onnx"
    return p


@pytest.mark.parametrize("kind,message", [
    ("missing", "input file {q} does not exist"),
    ("folder", "input {q} is a directory, not an ONNX file"),
    ("fifo", "input {q} is not a regular file"),
    ("empty", "input file {q} is empty, so not an ONNX file"),
    ("garbage", "{q} is not an ONNX file (protobuf could not parse it: DecodeError)"),
    ("dangling", "input {q} is a dangling symbolic link to {gone}"),
    ("under-a-file", "input file {q} does not exist (a parent of it is a file)"),
])
def test_input_problems_are_named(capsys, tmp_path, kind, message):
    path = _make_input(tmp_path, kind)
    rc, _, err = cli(capsys, "fuse", path, tmp_path / "out.onnx")
    assert (rc, err) == (2, message.format(q=_q(path), gone=_q(tmp_path / "gone.onnx")))
    assert not (tmp_path / "out.onnx").exists()


def test_unreadable_input_is_not_called_not_onnx(tmp_path, monkeypatch, src):
    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(input_files, "open", denied, raising=False)
    with pytest.raises(InputFileError) as ei:
        fusedops.fuse(str(src), str(tmp_path / "out.onnx"))
    assert str(ei.value) == f"cannot read input file {_q(src)}: Permission denied"


def _external(tmp_path: Path, location: str) -> Path:
    """A model whose scale initializer points at ``location`` (32 bytes of data at offset 0)."""
    m = gn_model(C=8, G=4)
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "32")):
        e = t.external_data.add()
        e.key, e.value = k, v
    (tmp_path / "model").mkdir(exist_ok=True)
    return save(m, tmp_path / "model" / "m.onnx")


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink", "missing", "short", "folder"])
def test_external_data_problems_are_named(capsys, tmp_path, kind):
    data = np.linspace(0.5, 1.5, 8).astype(np.float32).tobytes()
    (tmp_path / "outside.bin").write_bytes(data)
    location = {"absolute": str(tmp_path / "outside.bin"), "dotdot": "../outside.bin", "symlink": "link.bin",
                "missing": "nothere.bin", "short": "short.bin", "folder": "sub"}[kind]
    model = _external(tmp_path, location)
    if kind == "symlink":
        (tmp_path / "model" / "link.bin").symlink_to(tmp_path / "outside.bin")
    if kind == "short":
        (tmp_path / "model" / "short.bin").write_bytes(data[:20])
    if kind == "folder":
        (tmp_path / "model" / "sub").mkdir()
    head = f"{_q(model)}: tensor 'scale' stores its data in {_q(location)}"
    want = {"absolute": f"{head}, an absolute path; external data must lie inside the model's folder",
            "dotdot": f"{head}, which leaves the model's folder ('..'); refusing to read it",
            "symlink": f"{head}, reached through the symbolic link {_q(tmp_path / 'model' / 'link.bin')}; refusing "
                       f"to follow it",
            "missing": f"{head}, which does not exist",
            "short": f"{head} at bytes 0..32, but the file has 20 bytes",
            "folder": f"{head}, which is not a regular file"}[kind]
    rc, _, err = cli(capsys, "fuse", model, tmp_path / "out.onnx")
    assert (rc, err) == (2, want)


def test_valid_external_data_still_fuses(capsys, tmp_path):
    data = np.linspace(0.5, 1.5, 8).astype(np.float32).tobytes()
    model = _external(tmp_path, "w.bin")
    (tmp_path / "model" / "w.bin").write_bytes(data)
    rc, _, _ = cli(capsys, "fuse", model, tmp_path / "out.onnx")
    assert rc == 0
    fused = onnx.load(str(tmp_path / "out.onnx"))
    assert fused.graph.node[0].op_type == "GroupNormAct"


def test_module_has_no_leftover_temporaries_after_a_failed_export(tmp_path, monkeypatch):
    monkeypatch.setattr(exporter_api, "export_fused_model", lambda *a, **k: (_ for _ in ()).throw(
        KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        fusedops.export("1", str(tmp_path / "m.onnx"))
    assert list(tmp_path.iterdir()) == []
