"""The serving sweep that tools/gpu/device_serve.sh runs on the GPU, run short on the CPU so the device run cannot fail
on a bug CI could have found: both servers (fused on ORT CPU + library, eager PyTorch through PyTriton), the load
test against each, the in-process ModelNew latency, the target evaluation, JSON and PNG."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytriton", reason="PyTriton (the serve extra) is not installed: pip install -e '.[serve]'")
pytest.importorskip("tritonclient.grpc", reason="tritonclient (the serve extra) is not installed")

from fusedops import ort as fo_ort  # noqa: E402
from fusedops.serve import sweep  # noqa: E402


@pytest.mark.skipif(fo_ort.unavailable_reason() is not None, reason=f"{fo_ort.unavailable_reason()}")
def test_sweep_runs_end_to_end_on_the_cpu(tmp_path):
    report = sweep.run_sweep(tmp_path, "1", "small", "auto", [1, 4], {1: 1.0, 4: 1.0}, tolerance="fp32",
                             compare_durations={1: 0.5, 4: 0.5}, compare_instances=2, compare_delay_us=100)
    assert "on ort-cpu (cpu) via tritonserver" in report["fused"]["ready_line"]
    assert "on ort-cpu (cpu) via pytriton" in report["fused_pytriton"]["ready_line"]
    assert "on torch-eager (cpu) via pytriton" in report["eager_baseline"]["ready_line"]
    assert report["max_queue_delay_us"] == 0 and report["fused_delay"]["max_queue_delay_us"] == 100
    for side in ("fused", "fused_instances", "fused_delay", "fused_pytriton", "eager_baseline"):
        points = report[side]["points"]
        assert [p["concurrency"] for p in points] == ([4] if side == "fused_instances" else [1, 4])
        assert all(p["ok"] > 0 and p["wrong"] == p["errors"] == p["lost"] == 0 for p in points), points
    assert report["fused_instances"]["instances"] == 2
    assert report["inprocess_modelnew"]["host_to_host_p50_ms"] > 0
    targets = report["targets"]
    assert set(targets) == {"p50_c1_vs_inprocess", "p99_c1_vs_p50", "throughput_c4_over_c1", "lost_or_wrong"}
    assert targets["lost_or_wrong"] == {"count": 0, "met": True}
    saved = json.loads((tmp_path / "serve_sweep.json").read_text())
    assert saved["targets"] == json.loads(json.dumps(targets))
    assert (tmp_path / "serve_sweep.png").stat().st_size > 10_000
    assert [ln.split("c=")[1].split()[0] for ln in sweep.summary(report).splitlines()[1:]] == ["1", "4", "4"] + \
        ["1", "4"] * 3
    assert " x2 " in sweep.summary(report).splitlines()[3]
    assert " delay 100 us " in sweep.summary(report).splitlines()[4]


def test_more_instances_need_the_tritonserver_path():
    from fusedops.errors import FusedopsError
    from fusedops.serve.server import ServeOptions, check_options

    with pytest.raises(FusedopsError, match="needs --server tritonserver"):
        check_options(ServeOptions(source="m.onnx", server="pytriton", instances=2))
    with pytest.raises(FusedopsError, match="--instances must be >= 1"):
        check_options(ServeOptions(source="m.onnx", instances=0))


def test_bad_durations_are_one_error_line(capsys):
    assert sweep.main(["--out", "unused", "--durations", "x:1"]) == 2
    assert "CONCURRENCY:SECONDS" in capsys.readouterr().err
    assert sweep.main(["--out", "unused", "--durations", "1:1", "8:1", "--compare-durations", "1:1"]) == 2
    assert "give the same" in capsys.readouterr().err
    assert sweep.main(["--out", "unused", "--durations", "1:1", "--compare-delay-us", "0"]) == 2
    assert "--compare-delay-us must be >= 0 and differ from --max-queue-delay-us (0)" in capsys.readouterr().err
