// Plans: the C ABI's create / run / destroy. The CPU side runs the core's kernels; the CUDA side lives in
// cuda/cuda_plan.cu (or answers FUSEDOPS_ERR_NOT_BUILT in a build without CUDA).
#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "core/cpu_convt.h"
#include "core/conv_rules.h"
#include "core/message.h"
#include "fusedops/fusedops.h"
#include "plan_backend.h"

struct fusedops_plan {
  fusedops_op_desc desc{};
  int32_t device = FUSEDOPS_DEVICE_CPU;
  int32_t fixed_inputs = 0;   // X, (W, B,) gamma, beta
  int32_t needed_extras = 0;  // extras the chains reference
  bool empty = false;         // N = 0 or S = 0: nothing to compute
  size_t workspace = 0;
  std::string kernels;
  fusedops::CudaPlanPtr cuda;
};

namespace {

using fusedops::core::set_message;

const char* op_name(int32_t op) {
  if (op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT) return "ConvTransposeGroupNormAct";
  return op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT ? "GemmGroupNormAct" : "GroupNormAct";
}

// The transposed convolution of a ConvTransposeGroupNormAct descriptor against ONNX ConvTranspose's rules (the same
// functions fusedops_describe applies, core/conv_rules.h), and the output size against gn.S: a descriptor built by
// hand is checked as strictly as one fusedops_describe made.
int check_conv(const fusedops_op_desc& d, char* err, size_t err_len) {
  const char* op = "ConvTransposeGroupNormAct";
  const fusedops_conv_desc& cv = d.conv;
  const fusedops_groupnorm_desc& gn = d.d.gn;
  if (cv.spatial_rank < 1 || cv.spatial_rank > 2)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: spatial_rank must be 1 or 2, got %d", op,
                       cv.spatial_rank);
  if (cv.channels_last != 0 && cv.channels_last != 1)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: channels_last must be 0 or 1, got %d", op,
                       cv.channels_last);
  if (cv.group < 1 || cv.in_channels < 1 || cv.in_channels % cv.group != 0 || gn.C % cv.group != 0)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "%s: group %d must divide the input channels (%lld) and the output channels (%lld)", op,
                       cv.group, static_cast<long long>(cv.in_channels), static_cast<long long>(gn.C));
  int64_t s = 1;
  for (int i = 0; i < cv.spatial_rank; ++i) {
    const char* problem = fusedops::core::convtranspose_dim_problem(
        cv.kernel[i], cv.strides[i], cv.dilations[i], cv.pads_begin[i], cv.pads_end[i], cv.output_padding[i]);
    if (problem || cv.input[i] < 0)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                         "%s: spatial dim %d: %s (kernel %d, stride %d, dilation %d, pads %d/%d, output_padding %d, "
                         "input %lld)", op, i, problem ? problem : "the input size must be >= 0", cv.kernel[i],
                         cv.strides[i], cv.dilations[i], cv.pads_begin[i], cv.pads_end[i], cv.output_padding[i],
                         static_cast<long long>(cv.input[i]));
    const int64_t out = fusedops::core::convtranspose_output_size(
        cv.input[i], cv.kernel[i], cv.strides[i], cv.pads_begin[i], cv.pads_end[i], cv.output_padding[i], cv.dilations[i]);
    if (cv.input[i] > 0 && (out < 1 || out != cv.output[i]))
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                         "%s: spatial dim %d: the output size is %lld by ConvTranspose's rule, the descriptor says "
                         "%lld", op, i, static_cast<long long>(out), static_cast<long long>(cv.output[i]));
    s *= cv.input[i] > 0 ? cv.output[i] : 0;
  }
  if (s != gn.S)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "%s: gn.S is %lld, the output's spatial size %lld", op, static_cast<long long>(gn.S),
                       static_cast<long long>(s));
  return FUSEDOPS_OK;
}

// A descriptor fusedops_describe completed: every shape and dtype known, and the kernels' own checks pass (run on
// a copy with an empty batch or K = 0 replaced by 1, which they would reject and the plans handle).
int check_complete(const fusedops_op_desc& d, char* err, size_t err_len) {
  if (d.op != FUSEDOPS_OP_GROUPNORM_ACT && d.op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT &&
      d.op != FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "unknown op code %d", d.op);
  const fusedops_groupnorm_desc& gn = d.d.gn;
  if (gn.N < 0 || gn.C < 0 || gn.S < 0 || d.d.K < 0 || gn.x_dtype < 0 || gn.param_dtype < 0)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "%s: the descriptor is incomplete (N=%lld C=%lld S=%lld K=%lld, dtypes %d/%d): every shape "
                       "and dtype must be known to make a plan",
                       op_name(d.op), static_cast<long long>(gn.N), static_cast<long long>(gn.C),
                       static_cast<long long>(gn.S), static_cast<long long>(d.d.K), gn.x_dtype, gn.param_dtype);
  fusedops_gemm_desc probe = d.d;
  if (probe.gn.N == 0) probe.gn.N = 1;
  if (probe.gn.S == 0) probe.gn.S = 1;
  char msg[512] = {0};
  const int rc = d.op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT ? fusedops_gemm_groupnorm_act_check(&probe, msg, sizeof msg)
                                                        : fusedops_groupnorm_act_check(&probe.gn, msg, sizeof msg);
  if (rc != FUSEDOPS_OK) return set_message(err, err_len, rc, "%s: %s", op_name(d.op), msg);
  if (d.op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT) return check_conv(d, err, err_len);
  return FUSEDOPS_OK;
}

int run_cpu(const fusedops_plan& p, const void* const* in, int32_t n, void* y, char* err, size_t err_len) {
  const int32_t extras = n - p.fixed_inputs;
  if (p.desc.op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT)
    return fusedops::cpu::convt_groupnorm_act_cpu(p.desc, in, n, y, err, err_len);
  if (p.desc.op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT)
    return fusedops_gemm_groupnorm_act_cpu(&p.desc.d, in[0], in[1], in[2], in[3], in[4], in + 5, extras, y, err,
                                           err_len);
  return fusedops_groupnorm_act_cpu(&p.desc.d.gn, in[0], in[1], in[2], in + 3, extras, y, err, err_len);
}

}  // namespace

extern "C" {

FUSEDOPS_API int fusedops_plan_create(const fusedops_op_desc* d, int32_t device, const fusedops_plan_options* options,
                                      fusedops_plan** out, char* err, size_t err_len) {
  if (!d || !out) return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "descriptor or output is NULL");
  *out = nullptr;
  if (device < FUSEDOPS_DEVICE_CURRENT)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "device %d is neither a CUDA ordinal, CPU (-1) nor the current CUDA device (-2)", device);
  int rc = check_complete(*d, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  fusedops_plan_options opts{};
  if (options) opts = *options;
  try {
    auto p = std::unique_ptr<fusedops_plan>(new fusedops_plan());
    p->desc = *d;
    p->device = device;
    p->fixed_inputs = d->op == FUSEDOPS_OP_GROUPNORM_ACT ? 3 : 5;
    p->needed_extras = fusedops_num_extras(&d->d.gn.pre, &d->d.gn.post);
    p->empty = d->d.gn.N == 0 || d->d.gn.S == 0;
    if (p->empty) {
      p->kernels = "none (empty batch)";
    } else if (device == FUSEDOPS_DEVICE_CPU && d->op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT) {
      // cpu_convt.cpp indexes X and Y as NCHW; a channels-last descriptor would read them wrongly (the PyTorch op
      // makes such tensors contiguous before it describes them)
      if (d->conv.channels_last)
        return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                           "ConvTransposeGroupNormAct: the CPU kernel takes NCHW tensors only (channels_last = 1 "
                           "given)");
      p->kernels = "cpu: gemm + col2im + groupnorm";
    } else if (device == FUSEDOPS_DEVICE_CPU) {
      p->kernels = d->op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT ? "cpu: eigen gemm + row epilogue" : "cpu: groupnorm";
    } else {
      rc = fusedops::cuda_plan_create(*d, device, opts, &p->cuda, &p->workspace, &p->kernels, err, err_len);
      if (rc != FUSEDOPS_OK) return rc;
    }
    *out = p.release();
    return FUSEDOPS_OK;
  } catch (const std::bad_alloc&) {
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: out of host memory while planning",
                       op_name(d->op));
  }
}

FUSEDOPS_API void fusedops_plan_destroy(fusedops_plan* plan) { delete plan; }

FUSEDOPS_API size_t fusedops_plan_workspace_size(const fusedops_plan* plan) { return plan ? plan->workspace : 0; }

FUSEDOPS_API const char* fusedops_plan_kernels(const fusedops_plan* plan) { return plan ? plan->kernels.c_str() : ""; }

FUSEDOPS_API const fusedops_op_desc* fusedops_plan_desc(const fusedops_plan* plan) {
  return plan ? &plan->desc : nullptr;
}

FUSEDOPS_API int fusedops_plan_run(const fusedops_plan* p, const void* const* inputs, int32_t num_inputs, void* y,
                                   void* workspace, size_t workspace_size, fusedops_stream_t stream, char* err,
                                   size_t err_len) {
  return fusedops_plan_run_prepared(p, inputs, num_inputs, nullptr, y, workspace, workspace_size, stream, err,
                                    err_len);
}

FUSEDOPS_API size_t fusedops_plan_prepared_weights_size(const fusedops_plan* p) {
  if (!p || p->empty || p->device == FUSEDOPS_DEVICE_CPU || !p->cuda) return 0;
  return fusedops::cuda_plan_prepared_weights_size(*p->cuda);
}

FUSEDOPS_API int fusedops_plan_prepare_weights(const fusedops_plan* p, const void* w, void* prepared,
                                               size_t prepared_size, fusedops_stream_t stream, char* err,
                                               size_t err_len) {
  if (!p) return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "plan is NULL");
  const size_t need = fusedops_plan_prepared_weights_size(p);
  if (need == 0)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: this plan takes no prepared weights (only GemmGroupNormAct plans running 3xTF32 do; "
                       "fusedops_plan_prepared_weights_size is 0)",
                       op_name(p->desc.op));
  if (!w || !prepared)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "GemmGroupNormAct: W or the prepared buffer is NULL");
  if (prepared_size < need)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "GemmGroupNormAct: prepared buffer of %zu bytes, the plan's weights need %zu", prepared_size,
                       need);
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(prepared) % 16 != 0)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "GemmGroupNormAct: W and the prepared buffer must be 16-byte aligned to prepare weights");
  return fusedops::cuda_plan_prepare_weights(*p->cuda, w, prepared, stream, err, err_len);
}

FUSEDOPS_API int fusedops_plan_run_prepared(const fusedops_plan* p, const void* const* inputs, int32_t num_inputs,
                                            const void* prepared, void* y, void* workspace, size_t workspace_size,
                                            fusedops_stream_t stream, char* err, size_t err_len) {
  if (!p) return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "plan is NULL");
  if (prepared && fusedops_plan_prepared_weights_size(p) == 0) prepared = nullptr;  // the plan has no use for it
  if (prepared && reinterpret_cast<uintptr_t>(prepared) % 16 != 0)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "GemmGroupNormAct: the prepared weights are not 16-byte aligned");
  const char* op = op_name(p->desc.op);
  if (num_inputs < p->fixed_inputs + p->needed_extras || num_inputs > p->fixed_inputs + FUSEDOPS_MAX_EXTRAS)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "%s: %d inputs given; the plan needs %d to %d (the chains reference %d extra input(s))", op,
                       num_inputs, p->fixed_inputs + p->needed_extras, p->fixed_inputs + FUSEDOPS_MAX_EXTRAS,
                       p->needed_extras);
  if (p->empty) return FUSEDOPS_OK;
  if (!inputs || !y) return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: inputs or Y is NULL", op);
  const bool gemm = p->desc.op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT;
  const bool optional_bias = p->fixed_inputs == 5;  // GemmGroupNormAct's and ConvTransposeGroupNormAct's B
  // K = 0: X and W have no elements (their pointers may be NULL) and are never read; the kernels still want
  // non-NULL pointers, so they get a stand-in.
  const void* patched[5 + FUSEDOPS_MAX_EXTRAS];
  if (gemm && p->desc.d.K == 0) {
    static const float stand_in = 0.f;
    for (int32_t i = 0; i < num_inputs; ++i) patched[i] = inputs[i];
    for (int32_t i = 0; i < 2; ++i)
      if (!patched[i]) patched[i] = &stand_in;
    inputs = patched;
  }
  for (int32_t i = 0; i < p->fixed_inputs + p->needed_extras; ++i) {
    if (inputs[i] || (optional_bias && i == 2)) continue;  // B may be absent (no bias)
    const char* names_gemm[] = {"X", "W", "B", "gamma", "beta"};
    const char* names_gn[] = {"X", "gamma", "beta"};
    if (i < p->fixed_inputs)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: %s pointer is NULL", op,
                         optional_bias ? names_gemm[i] : names_gn[i]);
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: extra input %d pointer is NULL", op,
                       i - p->fixed_inputs);
  }
  if (workspace_size < p->workspace || (p->workspace > 0 && !workspace))
    return set_message(err, err_len, FUSEDOPS_ERR_WORKSPACE, "%s: workspace of %zu bytes, the plan needs %zu", op,
                       workspace ? workspace_size : size_t(0), p->workspace);
  if (p->device == FUSEDOPS_DEVICE_CPU) return run_cpu(*p, inputs, num_inputs, y, err, err_len);
  return fusedops::cuda_plan_run(*p->cuda, inputs, num_inputs, prepared, y, workspace, workspace_size, stream, err,
                                 err_len);
}

FUSEDOPS_API size_t fusedops_workspace_size(const fusedops_op_desc* d) {
  if (!d || check_complete(*d, nullptr, 0) != FUSEDOPS_OK) return 0;
  if (d->d.gn.N == 0 || d->d.gn.S == 0) return 0;
  return fusedops::cuda_workspace_size(*d);
}

}  // extern "C"
