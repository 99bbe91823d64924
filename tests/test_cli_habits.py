"""The CLI's habits, as trtexec and Polygraphy users expect them: precision flags, --version, help on every flag, a
fast --help without torch, consistent output flags; the bench chart shows what is judged; reports carry provenance
and the fused ONNX the fusedops version."""

from __future__ import annotations

import argparse
import subprocess
import sys

import onnx
import pytest

import fusedops
from fusedops.cli import COMMANDS, bench, build, loadtest, make_parser, repo, serve

WRITES_ONE_FILE = {"export": "--out", "build": "--out"}
WRITES_A_FOLDER = {"demo": "--out-dir", "bench": "--out-dir", "repo": "--out-dir", "loadtest": "--out-dir"}
FORCE = ("export", "fuse", "demo", "bench", "build", "repo")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in make_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings}


def test_every_command_is_listed_and_every_flag_has_help():
    subs = _subparsers()
    assert sorted(subs) == sorted(c.NAME for c in COMMANDS)
    missing = [f"{name} {a.option_strings or a.dest}" for name, p in [("fusedops", make_parser()), *subs.items()]
               for a in p._actions if not isinstance(a, argparse._SubParsersAction) and not a.help]
    assert missing == []


def test_version(capsys):
    with pytest.raises(SystemExit) as ei:
        make_parser().parse_args(["--version"])
    assert ei.value.code == 0 and capsys.readouterr().out.strip() == f"fusedops {fusedops.__version__}"


def test_help_is_fast_and_imports_no_runtime():
    code = ("import sys, time; t = time.perf_counter(); from fusedops.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "for c in ('export', 'fuse', 'demo', 'verify', 'bench', 'build-native', 'build', 'serve', 'repo', "
            "'loadtest'):\n"
            "    try:\n        main([c, '--help'])\n    except SystemExit:\n        pass\n"
            "heavy = sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'onnxscript', 'tensorrt', 'matplotlib') "
            "if m in sys.modules)\n"
            "print('RESULT', time.perf_counter() - t, heavy, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    line = [x for x in proc.stderr.splitlines() if x.startswith("RESULT")][0]
    seconds, heavy = float(line.split()[1]), line.split(" ", 2)[2]
    assert heavy == "[]", f"building the parsers imported {heavy}"
    assert seconds < 1.0, f"fusedops --help and every command's --help took {seconds:.2f} s"


@pytest.mark.parametrize("argv, precision", [
    ([], "tf32"), (["--fp16"], "fp16"), (["--bf16"], "bf16"), (["--tf32"], "tf32"), (["--noTF32"], "fp32"),
    (["--precision", "fp16"], "fp16"),  # the earlier spelling
])
def test_build_precision_flags(argv, precision):
    a = make_parser().parse_args(["build", "m.onnx", "--out", "m.plan", *argv])
    assert (a.precision, a.engine) == (precision, "m.plan")
    for old in ("--engine", "--saveEngine"):
        assert make_parser().parse_args(["build", "m.onnx", old, "e.plan"]).engine == "e.plan"


def test_precision_flags_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as ei:
        make_parser().parse_args(["build", "m.onnx", "--out", "m.plan", "--fp16", "--bf16"])
    assert ei.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv, chosen", [
    ([], ["fp32", "tf32", "bf16"]), (["--bf16"], ["bf16"]), (["--noTF32", "--tf32"], ["fp32", "tf32"]),
    (["--precisions", "tf32", "bf16"], ["tf32", "bf16"]),
])
def test_bench_precision_flags(argv, chosen):
    assert bench.selected_precisions(make_parser().parse_args(["bench", *argv])) == chosen


def test_loadtest_tolerance_by_precision_flag():
    parse = make_parser().parse_args
    assert parse(["loadtest", "h:1", "--reference", "1"]).tolerance == "tf32"
    assert parse(["loadtest", "h:1", "--reference", "1", "--noTF32"]).tolerance == "fp32"
    assert parse(["loadtest", "h:1", "--reference", "1", "--tolerance", "fp32"]).tolerance == "fp32"


def test_cli_constants_match_the_runtimes():
    """The parsers keep their own copies (no torch import for --help); these are the originals."""
    from fusedops.benchmark import latency, timing
    from fusedops.serve import backends, repository
    from fusedops.trt_build import builder
    from fusedops.workflows import names, verify

    assert build.PRECISIONS == builder.PRECISIONS and build.DEFAULT_MAX_BATCH == builder.DEFAULT_MAX_BATCH
    assert build.DEFAULT_WORKSPACE_MB == builder.DEFAULT_WORKSPACE_MB
    assert bench.PRECISIONS == timing.PRECISIONS and bench.COMPILE_MODES == latency.COMPILE_MODES
    assert tuple(verify.BACKENDS) == names.BACKEND_NAMES
    assert loadtest.__name__ and backends.BACKENDS
    assert serve.DEFAULT_MAX_QUEUE_DELAY_US == repo.DEFAULT_MAX_QUEUE_DELAY_US
    assert repo.DEFAULT_MAX_QUEUE_DELAY_US == repository.DEFAULT_MAX_QUEUE_DELAY_US


def test_output_flags_are_consistent():
    subs = _subparsers()
    for name, flag in {**WRITES_ONE_FILE, **WRITES_A_FOLDER}.items():
        assert flag in _options(subs[name]), (name, flag)
    for name in WRITES_ONE_FILE:
        assert "--out-dir" not in _options(subs[name])
    for name in FORCE:
        assert "--force" in _options(subs[name]), name


def test_verify_takes_tolerances():
    a = make_parser().parse_args(["verify", "1", "--atol", "1e-3", "--rtol", "0"])
    assert (a.atol, a.rtol) == (1e-3, 0.0)
    with pytest.raises(fusedops.errors.UsageError, match="atol must be a non-negative number"):
        fusedops.verify("1", backend="ort-cpu-functions", atol=-1.0)


def _bench_report():
    from fusedops.benchmark.results import BenchReport, Row, _fill_ratios

    def row(model, variant, p, ms):
        return Row(model, variant, p, ms, ms, ms, 1.0, 1.0)

    rows = [row("gemm_m", v, p, ms) for p in ("fp32", "tf32") for v, ms in
            (("eager", 0.9), ("floor", 0.35), ("compile", 0.5), ("fused", 0.36), ("fused_graph", 0.34),
             ("ort:ort-cuda-fused", 0.4))]
    rows += [row("convtranspose2d_x", v, "tf32", ms) for v, ms in
             (("eager", 9.0), ("floor", 6.6), ("fused", 8.0), ("gn_step_eager", 3.5), ("gn_step_fused", 1.6))]
    _fill_ratios(rows)
    return BenchReport("2026-11-23", "a GPU", "2.x", None, "bench", 20, 3, 3, rows=rows)


def test_bench_chart_shows_ratios_targets_and_legend(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (the 'bench' extra) draws the chart")
    from fusedops.benchmark import chart
    from fusedops.benchmark.results import GEMM_FLOOR_RATIO_TARGET, GN_STEP_TARGET_MS

    fig = chart.plot_bench(_bench_report())
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == ["time / floor (same precision)"] * 2 + ["median ms"]
    for ax in axes:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(lab.startswith("target:") for lab in labels) and "fused" in labels
        assert all(t.get_fontsize() >= 8 for t in ax.get_xticklabels())
    gemm = axes[0]
    assert any(ln.get_ydata()[0] == GEMM_FLOOR_RATIO_TARGET for ln in gemm.get_lines())
    fused_tf32 = [b.get_height() for c in gemm.containers if c.get_label() == "fused" for b in c][1]
    assert fused_tf32 == pytest.approx(0.36 / 0.35)
    assert any(ln.get_ydata()[0] == GN_STEP_TARGET_MS for ln in axes[2].get_lines())
    assert chart.save_figure(fig, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_latency_chart_shows_ratio_to_eager_and_target(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (the 'bench' extra) draws the chart")
    from fusedops.benchmark import chart
    from fusedops.benchmark.latency import BATCH1_VS_EAGER_TARGET, LatencyReport, LatencyRow

    rows = [LatencyRow("m", v, "tf32", b, ms, 10.0, ms, graph_sync_ms=0.08 if v == "fused" else None)
            for b in (1, 16) for v, ms in (("eager", 0.2), ("fused", 0.1), ("compile:default", 0.15),
                                           ("host_yardstick", 0.02))]
    fig = chart.plot_latency(LatencyReport("2026-11-23", "a GPU", "2.x", 200, rows=rows), BATCH1_VS_EAGER_TARGET)
    batch1 = fig.axes[0]
    bars = {c.get_label(): [b.get_height() for b in c] for c in batch1.containers}
    assert "host_yardstick" not in bars, "the host yardstick is no variant of the model"
    assert bars["fused, CUDA graph replay"] == [pytest.approx(0.08 / 0.2)]
    assert batch1.get_ylabel() == "sync time / eager"
    assert any(t.get_text().startswith("target:") for t in batch1.get_legend().get_texts())
    assert any(ln.get_ydata()[0] == BATCH1_VS_EAGER_TARGET for ln in batch1.get_lines())
    assert chart.save_figure(fig, tmp_path / "latency.png")


def test_bench_results_default_folder():
    import datetime as dt

    from fusedops.benchmark.results import results_dir

    d = results_dir("bench", dt.datetime(2026, 11, 23, 12, 0, 5, tzinfo=dt.timezone.utc))
    assert d.as_posix() == "bench/results/20261123-120005-bench"
    assert make_parser().parse_args(["bench"]).out_dir is None  # None: run_bench picks results_dir("bench")


def test_provenance_names_versions_date_and_device():
    from fusedops.provenance import provenance

    p = provenance("cpu")
    assert p["fusedops"] == fusedops.__version__ and p["device"] == "cpu"
    for dist in ("torch", "onnx", "onnxruntime"):
        assert p.get(dist) or (dist == "onnxruntime" and p.get("onnxruntime-gpu"))
    assert p["date"].endswith("UTC")


def test_fused_onnx_records_the_fusedops_version(tmp_path):
    out = tmp_path / "m.onnx"
    fusedops.export("1", str(out))
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert meta["fusedops_version"] == fusedops.__version__
