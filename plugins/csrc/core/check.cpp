// Descriptor validation shared by every entry (CPU here, CUDA in plugins/csrc/cuda, the runtime adapters).
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "core/message.h"
#include "fusedops/fusedops.h"

namespace {

using fusedops::core::set_err;  // UTF-8-safe truncation (core/message.h)

int check_chain(const fusedops_chain& c, const char* which, char* err, size_t err_len) {
  if (c.num_steps < 0 || c.num_steps > FUSEDOPS_MAX_STEPS) {
    set_err(err, err_len, "%s chain has %d steps; expected 0..%d", which, c.num_steps, FUSEDOPS_MAX_STEPS);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  for (int32_t i = 0; i < c.num_steps; ++i) {
    const fusedops_step& s = c.steps[i];
    if (!fusedops_step_is_known(s.op)) {
      set_err(err, err_len, "%s chain step %d has unknown op code %d", which, i, s.op);
      return FUSEDOPS_ERR_INVALID_ARGUMENT;
    }
    if (fusedops_step_is_binary(s.op) && (s.operand < -1 || s.operand >= FUSEDOPS_MAX_EXTRAS)) {
      set_err(err, err_len, "%s chain step %d references extra input %d; expected -1 (scalar) or 0..%d", which, i,
              s.operand, FUSEDOPS_MAX_EXTRAS - 1);
      return FUSEDOPS_ERR_INVALID_ARGUMENT;
    }
  }
  return FUSEDOPS_OK;
}

bool dtype_ok(int32_t dt) { return fusedops_dtype_is_supported(dt) != 0; }

}  // namespace

extern "C" {

FUSEDOPS_API int fusedops_groupnorm_act_check(const fusedops_groupnorm_desc* d, char* err, size_t err_len) {
  if (!d) {
    set_err(err, err_len, "descriptor is NULL");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (d->N <= 0 || d->C <= 0 || d->S <= 0) {
    set_err(err, err_len, "N=%lld, C=%lld and S=%lld must all be positive", static_cast<long long>(d->N),
            static_cast<long long>(d->C), static_cast<long long>(d->S));
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  // N*C*S elements must be addressable with int64 (and fit the product checks below without overflow).
  const double elems = static_cast<double>(d->N) * static_cast<double>(d->C) * static_cast<double>(d->S);
  if (elems > 9.0e18) {
    set_err(err, err_len, "tensor of N*C*S = %.3g elements is too large", elems);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (d->num_groups <= 0) {
    set_err(err, err_len, "num_groups must be positive, got %d", d->num_groups);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (d->C % d->num_groups != 0) {
    set_err(err, err_len, "C=%lld is not divisible by num_groups=%d", static_cast<long long>(d->C), d->num_groups);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (!std::isfinite(d->epsilon) || d->epsilon < 0.f) {
    set_err(err, err_len, "epsilon must be a finite non-negative number, got %g", static_cast<double>(d->epsilon));
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  int rc = check_chain(d->pre, "pre", err, err_len);
  if (rc) return rc;
  rc = check_chain(d->post, "post", err, err_len);
  if (rc) return rc;
  if (!fusedops_reduce_is_known(d->reduce)) {
    set_err(err, err_len, "unknown reduce code %d", d->reduce);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (!dtype_ok(d->x_dtype)) {
    set_err(err, err_len, "unsupported x_dtype %d (expected 0 float32, 1 float16, 2 bfloat16)", d->x_dtype);
    return FUSEDOPS_ERR_UNSUPPORTED;
  }
  if (!dtype_ok(d->param_dtype)) {
    set_err(err, err_len, "unsupported param_dtype %d (expected 0 float32, 1 float16, 2 bfloat16)", d->param_dtype);
    return FUSEDOPS_ERR_UNSUPPORTED;
  }
  return FUSEDOPS_OK;
}

FUSEDOPS_API int fusedops_gemm_groupnorm_act_check(const fusedops_gemm_desc* d, char* err, size_t err_len) {
  if (!d) {
    set_err(err, err_len, "descriptor is NULL");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (d->gn.S != 1) {
    set_err(err, err_len, "GemmGroupNormAct descriptor must have gn.S = 1 (every row is a sample), got %lld",
            static_cast<long long>(d->gn.S));
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (d->K < 0) {  // K = 0 is valid: X·Wᵀ is then zero and Y depends on the bias only
    set_err(err, err_len, "K=%lld must not be negative", static_cast<long long>(d->K));
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (static_cast<double>(d->K) * static_cast<double>(d->gn.N > d->gn.C ? d->gn.N : d->gn.C) > 9.0e18) {
    set_err(err, err_len, "GEMM of K=%lld is too large", static_cast<long long>(d->K));
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (d->trans_b != 0 && d->trans_b != 1) {
    set_err(err, err_len, "trans_b must be 0 or 1, got %d", d->trans_b);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  if (d->allow_tf32 != 0 && d->allow_tf32 != 1) {
    set_err(err, err_len, "allow_tf32 must be 0 or 1, got %d", d->allow_tf32);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  return fusedops_groupnorm_act_check(&d->gn, err, err_len);
}

}  // extern "C"
