"""The TensorRT plugin library driven by the headers-only harness, every step up to (not including) enqueue.

Needs the TensorRT headers (third_party/tensorrt/include or $TENSORRT_INCLUDE_DIR; see
scripts/get_tensorrt_headers.md), the CUDA runtime headers and cmake; skips with the reason when one is missing.
No GPU needed: without the CUDA kernels the plugin is built over the kernel stubs (libfusedops_trt_buildphase.so).
Enqueue on a GPU: tests/gpu/test_trt_harness_gpu.py.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from fusedops import catalog
from fusedops.convtranspose import ConvAttrs
from fusedops.errors import FusedopsError
from trt_harness import driver as H


@pytest.fixture(scope="module")
def build():
    if H.tensorrt_include_dir() is None:
        pytest.skip("TensorRT headers not found (third_party/tensorrt/include or TENSORRT_INCLUDE_DIR); "
                    "see scripts/get_tensorrt_headers.md")
    if shutil.which("cmake") is None:
        pytest.skip("cmake not found")
    try:
        return H.build_harness()
    except FusedopsError as e:
        if "skipped the TensorRT plugin" in str(e):
            pytest.skip(f"plugin not configurable here: {e}")
        raise


def _gn_case(shape, groups=3, pre="", post="", reduce="", dtype=torch.float32, param_dtype=torch.float32,
             dynamic="batch", extras=0, **kw):
    attrs = catalog.FusedAttrs(num_groups=groups, pre=catalog.parse_chain(pre), post=catalog.parse_chain(post),
                               reduce=reduce)
    C = shape[1] if len(shape) > 1 else shape[0]
    inputs = [H.HarnessInput("X", tuple(shape), dtype), H.HarnessInput("gamma", (C,), param_dtype),
              H.HarnessInput("beta", (C,), param_dtype)]
    inputs += [H.HarnessInput(f"extra_{k}", (C,), param_dtype) for k in range(extras)]
    return H.HarnessCase("GroupNormAct", H.fields_from_attrs("GroupNormAct", attrs), inputs, dynamic=dynamic, **kw), attrs


def _gemm_case(x_shape, C, groups=4, pre="", post="", reduce="", trans_b=1, dtype=torch.float32,
               param_dtype=torch.float32, dynamic="batch", extras=0, **kw):
    attrs = catalog.FusedAttrs(num_groups=groups, pre=catalog.parse_chain(pre), post=catalog.parse_chain(post),
                               reduce=reduce, trans_b=trans_b)
    K = x_shape[-1]
    w_shape = (C, K) if trans_b else (K, C)
    inputs = [H.HarnessInput("X", tuple(x_shape), dtype), H.HarnessInput("W", w_shape, dtype)]
    inputs += [H.HarnessInput(n, (C,), param_dtype) for n in ("B", "gamma", "beta")]
    inputs += [H.HarnessInput(f"extra_{k}", (C,), param_dtype) for k in range(extras)]
    return H.HarnessCase("GemmGroupNormAct", H.fields_from_attrs("GemmGroupNormAct", attrs), inputs,
                         dynamic=dynamic, **kw), attrs, w_shape


def _convt_case(x_shape, w_shape, groups=4, bias=True, pre="gelu", post="", reduce="", dtype=torch.float32,
                param_dtype=torch.float32, dynamic="batch", extras=0, more_fields=(), **conv):
    """ConvTransposeGroupNormAct; bias=False leaves B out (TensorRT's inputs are then X, W, gamma, beta, extras)."""
    attrs = catalog.FusedAttrs(num_groups=groups, pre=catalog.parse_chain(pre), post=catalog.parse_chain(post),
                               reduce=reduce, conv=ConvAttrs(**conv))
    C = w_shape[1] * attrs.conv.group
    params = ["B"] * bias + ["gamma", "beta"] + [f"extra_{k}" for k in range(extras)]
    inputs = [H.HarnessInput("X", tuple(x_shape), dtype), H.HarnessInput("W", tuple(w_shape), dtype)]
    inputs += [H.HarnessInput(n, (C,), param_dtype) for n in params]
    op = "ConvTransposeGroupNormAct"
    return H.HarnessCase(op, H.fields_from_attrs(op, attrs) + list(more_fields), inputs, dynamic=dynamic), attrs


ALL_STAGES = ["load", "creator", "create", "output_shapes", "output_types", "formats", "configure", "workspace",
              "serialize", "create_runtime", "attach", "shape_change"]


def test_library_exports_only_the_entry_points(build):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not found")
    out = subprocess.run([nm, "-D", "--defined-only", str(build.plugin)], capture_output=True, text=True, check=True)
    symbols = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    assert symbols == {"getCreators", "setLoggerFinder"}
    readelf = shutil.which("readelf")
    if readelf:
        dyn = subprocess.run([readelf, "-d", str(build.plugin)], capture_output=True, text=True, check=True).stdout
        assert "nvinfer" not in dyn, "the plugin library must not link any TensorRT library"


def test_creators_and_fields(build):
    out = subprocess.run([str(build.harness), "--plugin", str(build.plugin), "--list"], capture_output=True,
                         text=True, check=True)
    import json

    creators = {c["name"]: c for c in json.loads(out.stdout)["creators"]}
    assert set(creators) == set(H.PLUGIN_OPS)  # the spec's TensorRT ops
    for name in H.PLUGIN_OPS:
        spec = catalog.OPS[name]
        c = creators[name]
        assert (c["kind"], c["namespace"], c["version"]) == ("PLUGIN CREATOR_V3ONE", catalog.PLUGIN_NAMESPACE,
                                                              catalog.PLUGIN_VERSION)
        assert [f["name"] for f in c["fields"]] == [a.name for a in spec.attrs if a.name not in
                                                    ("plugin_namespace", "plugin_version")] + [
            "plugin_namespace", "plugin_version"]


GN_SHAPES = [((12, 6), "batch"), ((3, 6, 14), "batch"), ((3, 6, 14, 18), "batch"), ((2, 6, 3, 5, 7), "all"),
             ((5, 6, 9, 9), "none")]


@pytest.mark.parametrize("shape,dynamic", GN_SHAPES)
@pytest.mark.parametrize("dtype,param_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float32),
                                               (torch.bfloat16, torch.bfloat16)])
def test_group_norm_act_walk(build, tmp_path, shape, dynamic, dtype, param_dtype):
    case, attrs = _gn_case(shape, pre="gelu", post="add(@0);mish", dtype=dtype, param_dtype=param_dtype,
                           dynamic=dynamic, extras=1)
    r = H.run_case(build, case, tmp_path)
    assert r.ok and r.stages == ALL_STAGES, r.report
    assert tuple(r.report["output_shape"]) == catalog.output_shape("GroupNormAct", shape, attrs)
    assert r.report["output_dtype"] == H.DTYPE_CODES[dtype]
    if dynamic != "none":
        assert r.report["output_shape_exprs"][0] == "X.0"  # batch stays symbolic
    assert r.report["plugin_errors"] == []


@pytest.mark.parametrize("reduce", ["min", "max", "sum", "mean", "logsumexp"])
def test_group_norm_act_reduce_shape(build, tmp_path, reduce):
    case, attrs = _gn_case((4, 6, 5, 7), reduce=reduce, dynamic="all")
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report
    assert tuple(r.report["output_shape"]) == (4, 1, 5, 7)
    assert r.report["output_shape_exprs"] == ["X.0", "1", "X.2", "X.3"]


@pytest.mark.parametrize("x_shape,C,trans_b,reduce", [((12, 96), 160, 1, ""), ((7, 33), 12, 0, ""),
                                                     ((2, 5, 33), 12, 1, "min"), ((1, 8), 4, 1, "logsumexp")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gemm_group_norm_act_walk(build, tmp_path, x_shape, C, trans_b, reduce, dtype):
    case, attrs, w_shape = _gemm_case(x_shape, C, groups=4, pre="add(@0);hardtanh(-1,1);mish", post="mul(2)",
                                      reduce=reduce, trans_b=trans_b, dtype=dtype, extras=1)
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report
    assert r.stages == ALL_STAGES
    assert tuple(r.report["output_shape"]) == catalog.output_shape("GemmGroupNormAct", x_shape, attrs, w_shape)
    names = [f["name"] for f in r.report["serialized_fields"]]
    assert names == ["num_groups", "epsilon", "pre", "post", "reduce", "trans_b", "allow_tf32", "workspace_bytes"]


@pytest.mark.parametrize("key", ["matmul_groupnorm_leakyrelu_sum", "gemm_groupnorm_min_biasadd",
                                 "gemm_biasadd_hardtanh_mish_groupnorm", "convtranspose2d_gelu_groupnorm"])
@pytest.mark.parametrize("size", ["small", "bench"])
def test_model_cases_walk(build, tmp_path, key, size):
    case, _, _ = H.model_case(key, size, shapes_only=True)
    r = H.run_case(build, case, tmp_path)
    assert r.ok and r.stages == ALL_STAGES, r.report


CONVT_SHAPES = [  # X, W, conv attributes, dynamic dims of X, reduce
    ((3, 16, 9, 11), (16, 24, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1), output_padding=(1, 1)), "batch", ""),
    ((2, 12, 7, 9), (12, 10, 3, 3), dict(group=2, dilations=(2, 1), pads=(2, 0, 1, 1)), "all", ""),
    ((3, 20, 15), (20, 40, 5), dict(strides=(2,), pads=(2, 2), output_padding=(1,)), "none", ""),
    ((1, 8, 5, 7), (8, 16, 2, 2), dict(strides=(3, 2), kernel_shape=(2, 2)), "all", "logsumexp"),
]


@pytest.mark.parametrize("x_shape,w_shape,conv,dynamic,reduce", CONVT_SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype,param_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float32),
                                               (torch.bfloat16, torch.bfloat16)])
def test_convtranspose_group_norm_act_walk(build, tmp_path, x_shape, w_shape, conv, dynamic, reduce, bias, dtype,
                                           param_dtype):
    case, attrs = _convt_case(x_shape, w_shape, groups=4, bias=bias, post="mul(@0);mish", reduce=reduce, dtype=dtype,
                              param_dtype=param_dtype, dynamic=dynamic, extras=1, **conv)
    if reduce and build.real_kernels:  # the CUDA convolution has no channel reduction: refused, named, at plan time
        case.expect_fail = "shape_change"
    r = H.run_case(build, case, tmp_path)
    assert r.ok and (not case.expect_fail or "no channel reduction" in str(r.report)), r.report
    if case.expect_fail:
        return
    assert r.stages == ALL_STAGES and r.report["plugin_errors"] == [], r.report
    assert tuple(r.report["output_shape"]) == catalog.output_shape(case.op, x_shape, attrs, w_shape)
    assert r.report["output_dtype"] == H.DTYPE_CODES[dtype]
    exprs = r.report["output_shape_exprs"]
    assert exprs[0] == ("X.0" if dynamic != "none" else str(x_shape[0]))
    assert all("X." in e for e in exprs[2:]) == (dynamic == "all")  # spatial sizes symbolic where X's are
    assert exprs[1] == ("1" if reduce else str(w_shape[1] * attrs.conv.group))
    assert _serialized_int(r.report, "has_bias") == int(bias)


@pytest.mark.parametrize("size", ["small", "bench"])
def test_model4_as_one_convtranspose_node_walk(build, tmp_path, size):
    case, _, _ = H.model_case("convtranspose2d_gelu_groupnorm", size, shapes_only=True, fuse_conv=True)
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report
    x, w = case.inputs[0].shape, case.inputs[1].shape
    assert tuple(r.report["output_shape"]) == (x[0], w[1], x[2] + 2, x[3] + 2)  # kernel 3, stride 1, no pads


def test_convtranspose_list_fields_take_onnx_defaults_and_any_integer_type(build, tmp_path):
    case, _ = _convt_case((2, 8, 5, 6), (8, 8, 3, 3), groups=2)
    case.fields = ["num_groups:i32:2", "strides:i64s:2,1", "pads:i16s:", "dilations:i8s:1,1"]  # pads: empty = 0
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report
    assert tuple(r.report["output_shape"]) == (2, 8, 11, 8)


def _convt_bad(**kw):
    return _convt_case((2, 8, 5, 5), (8, 8, 3, 3), **{"strides": (2, 2), **kw})[0]


REJECTIONS = {
    # name: (case builder, stage where the plugin must refuse)
    "num_groups_float": (lambda: _gn_case((2, 6))[0], "num_groups:f32:3", "create"),
    "num_groups_list": (lambda: _gn_case((2, 6))[0], "num_groups:i32s:3,3", "create"),
    "num_groups_zero": (lambda: _gn_case((2, 6))[0], "num_groups:i32:0", "create"),
    "epsilon_int": (lambda: _gn_case((2, 6))[0], "epsilon:i32:1", "create"),
    "epsilon_negative": (lambda: _gn_case((2, 6))[0], "epsilon:f32:-1", "create"),
    "unknown_step": (lambda: _gn_case((2, 6))[0], "pre:char:gelu;frobnicate", "create"),
    "bad_step_arity": (lambda: _gn_case((2, 6))[0], "post:char:hardtanh(1,2,3)", "create"),
    "pre_not_string": (lambda: _gn_case((2, 6))[0], "pre:i32:1", "create"),
    "corrupt_string_length": (lambda: _gn_case((2, 6))[0], "post:char@-7:mish", "create"),
    "huge_string_length": (lambda: _gn_case((2, 6))[0], "post:char@100000:mish", "create"),
    "bad_reduce": (lambda: _gn_case((2, 6))[0], "reduce:char:median", "create"),
    "unknown_field": (lambda: _gn_case((2, 6))[0], "alpha:f32:1", "create"),
    "gemm_field_on_gn": (lambda: _gn_case((2, 6))[0], "trans_b:i32:1", "create"),
    "trans_b_two": (lambda: _gemm_case((4, 8), 8)[0], "trans_b:i32:2", "create"),
    "allow_tf32_i64_three": (lambda: _gemm_case((4, 8), 8)[0], "allow_tf32:i64:3", "create"),
    "workspace_bytes_negative": (lambda: _gn_case((2, 6))[0], "workspace_bytes:i64:-1", "create"),
    "workspace_bytes_float": (lambda: _gn_case((2, 6))[0], "workspace_bytes:f32:1", "create"),
    "strides_float": (_convt_bad, "strides:f32s:1,1", "create"),
    "strides_three_values": (_convt_bad, "strides:i32s:1,1,1", "create"),
    "pads_odd_count": (_convt_bad, "pads:i32s:1,1,1", "create"),
    "kernel_shape_other_rank": (_convt_bad, "kernel_shape:i32s:3", "create"),
    "dilations_zero": (_convt_bad, "dilations:i32s:0,1", "create"),
    "output_padding_not_below_stride": (_convt_bad, "output_padding:i32s:2,2", "create"),
    "ints_absurd_length": (_convt_bad, "strides:i32s@100:1,1", "create"),
    "group_zero": (_convt_bad, "group:i32:0", "create"),
    "group_list": (_convt_bad, "group:i32s:1,1", "create"),
    "has_bias_two": (_convt_bad, "has_bias:i32:2", "create"),
    "has_bias_on_gemm": (lambda: _gemm_case((4, 8), 8)[0], "has_bias:i32:1", "create"),
    "trans_b_on_convt": (_convt_bad, "trans_b:i32:1", "create"),
    "allow_tf32_two_on_convt": (_convt_bad, "allow_tf32:i32:2", "create"),
}


@pytest.mark.parametrize("name", list(REJECTIONS))
def test_bad_fields_are_refused_cleanly(build, tmp_path, name):
    make, field, stage = REJECTIONS[name]
    case = make()
    fname = field.split(":", 1)[0]
    case.fields = [f for f in case.fields if not f.startswith(fname + ":")] + [field]
    case.expect_fail = stage
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report  # failed exactly at `stage`, with the reason logged through the logger finder
    assert r.report["failed_stage"] == stage
    assert any(fname in e or "field" in e for e in r.report["plugin_errors"]), r.report["plugin_errors"]


def test_missing_and_duplicate_fields(build, tmp_path):
    case, _ = _gn_case((2, 6))
    case.fields = [f for f in case.fields if not f.startswith("num_groups:")]
    case.expect_fail = "create"
    r = H.run_case(build, case, tmp_path)
    assert r.ok and "num_groups" in r.report["plugin_errors"][0]
    case, _ = _gn_case((2, 6))
    case.fields.append("epsilon:f32:0.001")
    case.expect_fail = "create"
    r = H.run_case(build, case, tmp_path)
    assert r.ok and "twice" in r.report["plugin_errors"][0]
    case, _ = _gn_case((2, 6))
    case.no_fields = True
    case.expect_fail = "create"
    assert H.run_case(build, case, tmp_path).ok


def test_defaults_apply_when_fields_are_absent(build, tmp_path):
    case, _, _ = _gemm_case((4, 8), 8)
    case.fields = ["num_groups:i32:2"]  # only the required field, as a hand-written network might pass
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report
    assert tuple(r.report["output_shape"]) == (4, 8)


def test_strings_with_nul_terminator_accepted(build, tmp_path):
    case, _ = _gn_case((2, 6, 4))
    case.fields = [f for f in case.fields if not f.startswith("post:")] + ["post:charz:leaky_relu(0.2)"]
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report
    post = next(f for f in r.report["serialized_fields"] if f["name"] == "post")
    assert post["length"] == len("leaky_relu(0.2)")


BAD_SHAPES = [
    ("gn_C_not_divisible", lambda: _gn_case((2, 7, 5), groups=3)[0], "output_shapes"),
    ("gn_C_not_divisible_dynamic", lambda: _gn_case((2, 7, 5), groups=3, dynamic="all")[0], "configure"),
    ("gn_rank_too_high", lambda: _gn_case((2, 6, 2, 2, 2, 2), groups=3)[0], "output_shapes"),
    ("gn_rank_one", lambda: _gn_case((6,), groups=3)[0], "output_shapes"),
    ("gemm_C_not_divisible", lambda: _gemm_case((4, 8), 10, groups=4)[0], "output_shapes"),
    ("gemm_w_rank3", lambda: _bad_w_rank(), "output_shapes"),
    ("convt_x_rank5", lambda: _convt_case((2, 8, 3, 3, 3), (8, 8, 3, 3, 3))[0], "output_shapes"),
    ("convt_cin_mismatch", lambda: _convt_case((2, 8, 5, 5), (6, 8, 3, 3))[0], "output_shapes"),
    ("convt_C_not_divisible", lambda: _convt_case((2, 8, 5, 5), (8, 10, 3, 3), groups=4)[0], "output_shapes"),
    ("convt_group_not_dividing_cin", lambda: _convt_case((2, 8, 5, 5), (8, 4, 3, 3), group=3)[0], "output_shapes"),
    ("convt_output_below_one", lambda: _convt_case((2, 8, 1, 1), (8, 8, 3, 3), pads=(3,) * 4)[0], "output_shapes"),
    ("convt_kernel_shape_vs_W", lambda: _convt_case((2, 8, 5, 5), (8, 8, 3, 3), kernel_shape=(2, 2))[0],
     "output_shapes"),
    # 4 inputs where @0 needs 6 (5 without B); and 4 beside has_bias = 1 (configurePlugin's field fixes the count)
    ("convt_too_few_inputs", lambda: _convt_case((2, 8, 5, 5), (8, 8, 3, 3), bias=False, post="mul(@0)")[0],
     "output_shapes"),
    ("convt_has_bias_vs_inputs", lambda: _convt_case((2, 8, 5, 5), (8, 8, 3, 3), bias=False,
                                                     more_fields=["has_bias:i32:1"])[0], "output_shapes"),
]


def _bad_w_rank():
    case, _, _ = _gemm_case((4, 8), 8)
    case.inputs[1].shape = (8, 8, 1)
    return case


@pytest.mark.parametrize("name", [b[0] for b in BAD_SHAPES])
def test_bad_shapes_are_refused_cleanly(build, tmp_path, name):
    _, make, stage = next(b for b in BAD_SHAPES if b[0] == name)
    case = make()
    case.expect_fail = stage
    r = H.run_case(build, case, tmp_path)
    assert r.ok, r.report
    assert r.report["plugin_errors"], "the refusal must be logged"


def test_wrong_gamma_size_and_K_mismatch(build, tmp_path):
    case, _ = _gn_case((2, 6, 4))
    case.inputs[1].shape = (5,)
    case.expect_fail = "output_shapes"
    r = H.run_case(build, case, tmp_path)
    assert r.ok and "gamma" in r.report["plugin_errors"][0]
    case, _, _ = _gemm_case((4, 8), 8)
    case.inputs[1].shape = (8, 9)
    case.expect_fail = "output_shapes"
    r = H.run_case(build, case, tmp_path)
    assert r.ok and "K=8" in r.report["plugin_errors"][0]


def test_missing_extra_input_is_refused(build, tmp_path):
    case, _ = _gn_case((2, 6, 4), post="mul(@1)", extras=1)  # @1 needs two extras
    case.expect_fail = "output_shapes"
    r = H.run_case(build, case, tmp_path)
    assert r.ok and "inputs" in r.report["plugin_errors"][0]


def test_mixed_parameter_types_refused_by_formats(build, tmp_path):
    case, _ = _gn_case((2, 6, 4), dtype=torch.float16, param_dtype=torch.float32)
    case.inputs[2].dtype = torch.float16  # beta not matching gamma
    case.expect_fail = "formats"
    r = H.run_case(build, case, tmp_path)
    # supportsFormatCombination answers false without logging (TensorRT probes many combinations): not a logged
    # error, so the harness reports the failure stage without an "expected" outcome.
    assert r.report["failed_stage"] == "formats"


# ---------------------------------------------------------------------------------------------------------------------
# Workspace over the profile, and runtime descriptions the build phase never saw
# ---------------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wsmodel(build):
    if build.wsmodel_plugin is None or not build.wsmodel_plugin.is_file():
        pytest.fail("the workspace-model plugin library was not built")
    return build.wsmodel_plugin


def _serialized_int(report, name):
    return next(f["value"] for f in report["serialized_fields"] if f["name"] == name)


WORKSPACE_PROFILES = [
    # (case, profile): the first is the audit's case, where batch 1..64 needs most near batch 31 and little at 64
    (lambda: _gn_case((64, 64, 64, 64), groups=32)[0], (1, 64, 64)),
    (lambda: _gn_case((8, 64, 4096), groups=32, reduce="mean")[0], (3, 8, 40)),
    (lambda: _gn_case((16, 64, 64, 64), groups=32, dynamic="all")[0], (1, 16, 100)),
    (lambda: _gemm_case((64, 8192), 64, groups=4, pre="mish")[0], (1, 64, 300)),
    (lambda: _convt_case((8, 64, 62, 62), (64, 64, 3, 3), groups=32, bias=False)[0], (1, 8, 40)),
]


@pytest.mark.parametrize("index", range(len(WORKSPACE_PROFILES)))
def test_workspace_covers_every_batch_of_the_profile(build, wsmodel, tmp_path, index):
    make, profile = WORKSPACE_PROFILES[index]
    case = make()
    case.profile_batch = profile
    case.workspace_probe = True
    r = H.run_case(build, case, tmp_path, plugin=wsmodel)
    assert r.ok, r.report  # the harness fails the "workspace" stage if any single batch needs more
    probe = r.report["workspace_probe"]
    assert probe["batches"] == profile[2] - profile[0] + 1
    assert r.report["workspace_bytes"] >= max(probe["needs"]) > 0
    assert r.report["workspace_bytes"] == _serialized_int(r.report, "workspace_bytes")


def test_workspace_need_is_not_monotone_in_the_audit_case(build, wsmodel, tmp_path):
    """The profile's ends alone under-reserve: the interior batch needs more than batch 1 and batch 64."""
    case = _gn_case((64, 64, 64, 64), groups=32)[0]
    case.profile_batch, case.workspace_probe = (1, 64, 64), True
    needs = H.run_case(build, case, tmp_path, plugin=wsmodel).report["workspace_probe"]["needs"]
    assert max(needs) > max(needs[0], needs[-1])


def test_workspace_of_a_wide_profile_is_sampled_but_covers_small_batches(build, wsmodel, tmp_path):
    case = _gn_case((64, 64, 64, 64), groups=32)[0]
    case.profile_batch, case.workspace_probe = (1, 64, 400_000), True  # beyond the exhaustive probe budget
    r = H.run_case(build, case, tmp_path, plugin=wsmodel)
    assert r.ok, {k: v for k, v in r.report.items() if k != "workspace_probe"}


RUNTIME_REJECTIONS = {
    # name: (case builder, runtime descriptions, expected stage, words of the logged error)
    "batch_beyond_reserved_workspace": (
        lambda: _gn_case((2, 64, 64, 64), groups=32)[0], {"X": (torch.float32, (9, 64, 64, 64))},
        "shape_change", "reserved"),
    "C_not_divisible_at_runtime": (
        lambda: _gn_case((3, 12, 5), groups=4, dynamic="all")[0],
        {"X": (torch.float32, (3, 10, 5)), "gamma": (torch.float32, (10,)), "beta": (torch.float32, (10,))},
        "shape_change", "divisible"),
    "gamma_mismatch_at_runtime": (
        lambda: _gn_case((3, 12, 5), groups=4, dynamic="all")[0], {"X": (torch.float32, (3, 8, 5))},
        "shape_change", "gamma"),
    "W_type_differs_from_X": (
        lambda: _gemm_case((4, 8), 8)[0], {"W": (torch.float16, (8, 8))}, "shape_change", "float16"),
    "param_types_mixed": (
        lambda: _gn_case((2, 6, 4), dtype=torch.float16)[0], {"beta": (torch.float16, (6,))}, "shape_change",
        "beta"),
    "output_wrong_size": (
        lambda: _gn_case((2, 6, 4))[0], {"Y": (torch.float32, (2, 6, 3))}, "shape_change", "Y has shape"),
    "output_wrong_type": (
        lambda: _gn_case((2, 6, 4))[0], {"Y": (torch.float16, (2, 6, 4))}, "shape_change", "Y is float16"),
    "convt_cin_mismatch_at_runtime": (
        lambda: _convt_case((3, 8, 5, 5), (8, 8, 3, 3), bias=False, dynamic="all")[0],
        {"X": (torch.float32, (3, 6, 5, 5))}, "shape_change", "input channels"),
    "convt_output_wrong_size": (
        lambda: _convt_case((3, 8, 5, 5), (8, 8, 3, 3))[0], {"Y": (torch.float32, (3, 8, 6, 6))}, "shape_change",
        "Y has shape"),
}


@pytest.mark.parametrize("name", list(RUNTIME_REJECTIONS))
def test_bad_runtime_descriptions_refused_at_shape_change(build, wsmodel, tmp_path, name):
    make, runtime, stage, words = RUNTIME_REJECTIONS[name]
    case = make()
    case.profile_batch = (1, 2, 2) if name.startswith("batch") else None
    case.runtime, case.expect_fail = runtime, stage
    r = H.run_case(build, case, tmp_path, plugin=wsmodel)
    assert r.ok, r.report  # every stage before passed, and the plugin refused exactly here with a logged error
    assert r.stages[-1] == "attach"
    assert any(words in e and "onShapeChange" in e for e in r.report["plugin_errors"]), r.report["plugin_errors"]


def test_runtime_batch_inside_the_profile_is_accepted(build, wsmodel, tmp_path):
    case = _gn_case((64, 64, 64, 64), groups=32)[0]
    case.profile_batch = (1, 64, 64)
    case.runtime = {"X": (torch.float32, (31, 64, 64, 64))}  # the batch with the largest need
    r = H.run_case(build, case, tmp_path, plugin=wsmodel)
    assert r.ok, r.report
    assert r.stages == ALL_STAGES
    assert r.report["runtime_output_shape"] == [31, 64, 64, 64]


@pytest.mark.parametrize("enqueue_only,words", [({"W": (torch.bfloat16, (8, 8))}, "W is bfloat16"),
                                                ({"X": (torch.float32, (400, 8))}, "expected 3200 elements")])
def test_enqueue_rechecks_its_own_descriptions(build, wsmodel, tmp_path, enqueue_only, words):
    case = _gemm_case((4, 8), 8, groups=4)[0]
    case.enqueue_only, case.fake_buffers, case.expect_fail = enqueue_only, True, "enqueue"
    r = H.run_case(build, case, tmp_path, plugin=wsmodel)
    assert r.ok, r.report
    assert "shape_change" in r.stages
    assert any(words in e and "enqueue" in e for e in r.report["plugin_errors"]), r.report["plugin_errors"]


def test_enqueue_with_good_descriptions_reaches_the_kernels(build, wsmodel, tmp_path):
    """Control for the test above: without a bad description, the refusal is the stand-in kernels' own."""
    case = _gemm_case((4, 8), 8, groups=4)[0]
    case.fake_buffers, case.expect_fail = True, "enqueue"
    r = H.run_case(build, case, tmp_path, plugin=wsmodel)
    assert r.ok, r.report
    assert any("no CUDA kernels" in e for e in r.report["plugin_errors"]), r.report["plugin_errors"]


@pytest.mark.parametrize("bias", [True, False])
def test_convtranspose_enqueue_maps_inputs_with_and_without_B(build, wsmodel, tmp_path, bias):
    """The runtime plugin (from the serialised fields) knows its input count at enqueue; a good call reaches the
    stand-in kernels, and a bad gamma is named as gamma whether or not B sits before it."""
    case = _convt_case((2, 8, 5, 5), (8, 8, 3, 3), bias=bias, post="mul(@0)", extras=1)[0]
    case.fake_buffers, case.expect_fail = True, "enqueue"
    r = H.run_case(build, case, tmp_path, plugin=wsmodel)
    assert r.ok and any("no CUDA kernels" in e for e in r.report["plugin_errors"]), r.report
    assert _serialized_int(r.report, "has_bias") == int(bias)
    case.enqueue_only = {"gamma": (torch.float16, (8,))}
    r = H.run_case(build, case, tmp_path, plugin=wsmodel)
    assert r.ok and any("enqueue" in e and "gamma is float16" in e for e in r.report["plugin_errors"]), r.report
