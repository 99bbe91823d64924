"""fusedops bench on a machine without CUDA: the clear error, and the report logic (ratios, targets, outputs)."""

import json
import time
from dataclasses import asdict

import pytest
import torch

from fusedops.errors import FusedopsError

from fusedops.benchmark import chart, gpu, results, timing


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error; this machine has CUDA")
def test_without_cuda_the_error_says_so():
    with pytest.raises(FusedopsError, match="needs a CUDA GPU"):
        gpu.run_bench(models=["1"])


def _r(model, variant, p, ms, peak=10.0, out=8.0):
    return results.Row(model, variant, p, ms, ms, ms, peak, out)


def test_ratios_and_targets():
    rows = [_r("gemm_m", "eager", "tf32", 0.75), _r("gemm_m", "floor", "tf32", 0.35),
            _r("gemm_m", "compile", "tf32", 0.43), _r("gemm_m", "fused", "tf32", 0.36, peak=8.5),
            _r("gemm_m", "fused", "fp32", 3.0, peak=17.0),  # no fp32 floor row: no ratio, no target
            _r("convtranspose2d_x", "floor", "tf32", 6.6), _r("convtranspose2d_x", "fused", "tf32", 8.0, 20, 8),
            _r("convtranspose2d_x", "gn_step_eager", "tf32", 3.5), _r("convtranspose2d_x", "gn_step_fused", "tf32", 1.6)]
    results._fill_ratios(rows)
    fused = rows[3]
    assert (fused.vs_floor, fused.vs_eager, fused.vs_compile) == (round(0.36 / 0.35, 3), 0.48, round(0.36 / 0.43, 3))
    assert rows[4].vs_floor is None
    assert rows[8].vs_eager == round(1.6 / 3.5, 3) and rows[8].vs_floor is None
    t = {(g.model, g.what): g for g in results._targets(rows)}
    assert t[("gemm_m", "fused / GEMM alone (tf32)")].met
    assert t[("gemm_m", "fused peak extra memory (tf32)")].met
    assert not t[("gemm_m", "fused peak extra memory (fp32)")].met  # 17 MiB extra for an 8 MiB output
    assert t[("convtranspose2d_x", "GELU+GroupNorm step (tf32)")].met
    conv_extra = t[("convtranspose2d_x", "whole model - conv alone (tf32)")]
    assert conv_extra.value == pytest.approx(1.4) and conv_extra.met


def test_table_json_and_png(tmp_path, capsys):
    rep = results.BenchReport("2026-11-22", "none", torch.__version__, None, "bench", 20, 3, 3,
                            rows=[_r("m", "eager", "fp32", 1.0), _r("m", "fused", "fp32", 0.5)])
    results._fill_ratios(rep.rows)
    results.print_table(rep)
    assert "fused" in capsys.readouterr().out
    pytest.importorskip("matplotlib", reason="matplotlib (the 'bench' extra) draws the chart")
    png = tmp_path / "b.png"
    assert chart.save_figure(chart.plot_bench(rep), png)
    assert png.read_bytes()[:4] == b"\x89PNG"
    json.dumps(asdict(rep))


def test_precision_mode_restores_settings():
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    with timing.precision_mode("fp32"):
        assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
    with timing.precision_mode("tf32"):
        assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before
    with pytest.raises(FusedopsError, match="unknown precision 'fp8'"):
        with timing.precision_mode("fp8"):
            pass


def test_onnxruntime_rows_are_adopted():
    r = results._runtime_row("m", {"model": "m", "backend": "ort-cuda-fused", "precision": "tf32", "median_ms": 0.5,
                             "batch": 1024, "runs": 20})
    assert (r.variant, r.precision, r.median_ms, r.note) == ("ort:ort-cuda-fused", "tf32", 0.5, "batch=1024, runs=20")
    rows = [_r("m", "eager", "tf32", 1.0), r]
    results._fill_ratios(rows)
    assert r.vs_eager is None  # other runtimes' rows are listed, not ratioed


def test_tensorrt_rows_are_named_trt():
    r = results._runtime_row("m", {"backend": "trt-engine", "precision": "fp32", "median_ms": 2.0}, "trt")
    assert (r.variant, r.precision, r.median_ms) == ("trt:trt-engine", "fp32", 2.0)


def test_onnxruntime_targets_against_unfused_and_the_pytorch_path():
    rows = [_r("gemm_m", "fused", "tf32", 0.40), _r("gemm_m", "ort:ort-cuda-unfused", "tf32", 5.0),
            _r("gemm_m", "ort:ort-cuda-fused", "tf32", 0.46),
            _r("gemm_n", "fused", "tf32", 0.40), _r("gemm_n", "ort:ort-cuda-unfused", "tf32", 0.5),
            _r("gemm_n", "ort:ort-cuda-fused", "tf32", 0.43),
            _r("convtranspose2d_x", "ort:ort-cuda-unfused", "tf32", 9.0),
            _r("convtranspose2d_x", "ort:ort-cuda-fused", "tf32", 8.0)]
    t = {(g.model, g.what): g for g in results._targets(rows)}
    m_speed, m_ratio = t[("gemm_m", "ORT unfused / ORT fused (tf32)")], t[("gemm_m", "ORT fused / PyTorch fused (tf32)")]
    assert m_speed.met and m_speed.value == round(5.0 / 0.46, 3)
    assert not m_ratio.met and m_ratio.value == round(0.46 / 0.40, 3)  # 1.15x the PyTorch path: missed
    assert not t[("gemm_n", "ORT unfused / ORT fused (tf32)")].met  # 1.16x: under 2x
    assert t[("gemm_n", "ORT fused / PyTorch fused (tf32)")].met
    assert not any(m == "convtranspose2d_x" and "ORT" in w for m, w in t)  # model 4 has no ORT target


# ---------------------------------------------------------------------------------------------------------------------
# --latency: target arithmetic and argument checks (the timings themselves need the GPU)
# ---------------------------------------------------------------------------------------------------------------------

def test_latency_targets_judge_each_rule():
    from fusedops.benchmark.latency import LatencyRow, targets

    m = "matmul_groupnorm_leakyrelu_sum"
    rows = [LatencyRow(m, "eager", "tf32", 1, 0.120, 60.0, 0.05),
            LatencyRow(m, "compile:reduce-overhead", "tf32", 1, 0.090, 20.0, 0.04),
            LatencyRow(m, "fused", "tf32", 1, 0.080, 12.0, 0.03, graph_ms=0.05),
            LatencyRow(m, "fused_op", "tf32", 1, 0.079, 16.0, 0.03),
            LatencyRow(m, "fused", "tf32", 1024, 0.420, 12.0, 0.40, graph_ms=0.39, graph_sync_ms=0.41),
            LatencyRow(m, "ort-cuda-fused", "tf32", 1024, 0.460, 30.0, 0.45),
            LatencyRow(m, "ort-cuda-fused-graph", "tf32", 1024, 0.430, 8.0, 0.42)]
    got = {t.what: (t.value, t.met) for t in targets(rows, {m: 1024})}
    assert got["batch 1 sync fused / eager (tf32)"] == (round(0.080 / 0.120, 3), True)
    assert got["batch 1 sync fused / compile:reduce-overhead (tf32)"] == (round(0.080 / 0.090, 3), True)
    assert got["host enqueue of the fused op (tf32, batch 1), us"] == (16.0, False)
    assert got["reference batch sync / graph replay GPU time (tf32)"] == (round(0.420 / 0.39, 3), False)
    assert got["reference batch sync / synchronised graph replay (tf32)"] == (round(0.420 / 0.41, 3), True)
    assert got["reference batch ORT fused / PyTorch fused (tf32)"] == (round(0.460 / 0.420, 3), False)
    assert got["reference batch ORT fused with ORT's CUDA graph / PyTorch fused (tf32)"] == (round(0.430 / 0.420, 3),
                                                                                               True)


def test_interleaved_sync_alternates_variants_in_rounds(monkeypatch):
    """The synchronous times of eager and fused are taken in alternating blocks (the ratio then compares the same
    moments of a shared machine), each variant getting its share of the calls and its own median."""
    from fusedops.benchmark import latency

    monkeypatch.setattr(latency.torch.cuda, "synchronize", lambda: None)
    order: list[str] = []

    def slow(x):  # a measurably slower variant
        order.append("slow")
        end = time.perf_counter() + 2e-4
        while time.perf_counter() < end:
            pass

    got = latency.interleaved_sync_ms({"fast": lambda x: order.append("fast"), "slow": slow}, [0, 1, 2], calls=6,
                                      rounds=3)
    timed = order[20:]  # after 10 warm-up calls of each
    assert timed == (["fast"] * 2 + ["slow"] * 2) * 3
    assert got["slow"] >= 0.2 > got["fast"]


def test_latency_needs_a_gpu_and_valid_arguments(monkeypatch):
    from fusedops.benchmark import latency

    monkeypatch.setattr(latency.torch.cuda, "is_available", lambda: False)
    with pytest.raises(FusedopsError, match="needs a CUDA GPU"):
        latency.run_latency(models=["1"])
