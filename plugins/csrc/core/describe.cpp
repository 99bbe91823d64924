// Attribute parsing and the ops' shape/dtype rules: the one copy every adapter (PyTorch, ONNX Runtime, TensorRT)
// uses, so they accept and reject the same nodes with the same messages.
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "core/message.h"
#include "fusedops/fusedops.h"

namespace {

using fusedops::core::set_message;

// Largest element count of one tensor the ops accept: far beyond any device (2^46 floats = 256 TiB), small enough
// that products of a few such numbers cannot overflow int64, and a clear error for a model that declares C = 2^40.
constexpr int64_t kMaxElements = int64_t{1} << 46;

const char* dtype_name(int32_t dt) {
  switch (dt) {
#define FUSEDOPS_DTYPE_NAME(E, NAME) \
  case FUSEDOPS_##E: return NAME;
    FUSEDOPS_DTYPES(FUSEDOPS_DTYPE_NAME)
#undef FUSEDOPS_DTYPE_NAME
    default: return "an unsupported dtype";
  }
}
bool dtype_ok(int32_t dt) { return fusedops_dtype_is_supported(dt) != 0; }

std::string shape_text(const fusedops_tensor_desc& t) {
  if (t.rank < 0) return "(rank unknown)";
  std::string s = "(";
  for (int32_t i = 0; i < t.rank; ++i) {
    if (i) s += ", ";
    s += t.dims[i] < 0 ? std::string("?") : std::to_string(t.dims[i]);
  }
  return s + (t.rank == 1 ? ",)" : ")");
}

// Number of elements, or -1 when a dim or the rank is unknown.
int64_t numel(const fusedops_tensor_desc& t) {
  if (t.rank < 0) return -1;
  int64_t n = 1;
  for (int32_t i = 0; i < t.rank; ++i) {
    if (t.dims[i] < 0) return -1;
    if (t.dims[i] != 0 && n > kMaxElements / t.dims[i]) return kMaxElements + 1;
    n *= t.dims[i];
  }
  return n;
}

// Product of dims [begin, end), -1 when any is unknown.
int64_t product(const fusedops_tensor_desc& t, int32_t begin, int32_t end) {
  int64_t n = 1;
  for (int32_t i = begin; i < end; ++i) {
    if (t.dims[i] < 0) return -1;
    if (t.dims[i] != 0 && n > kMaxElements / t.dims[i]) return kMaxElements + 1;
    n *= t.dims[i];
  }
  return n;
}

const char* op_name(int32_t op) {
  switch (op) {
#define FUSEDOPS_OP_NAME(E, NAME) \
  case FUSEDOPS_OP_##E: return NAME;
    FUSEDOPS_OPS(FUSEDOPS_OP_NAME)
#undef FUSEDOPS_OP_NAME
    default: return "an unknown op";
  }
}

struct Rules {
  const fusedops_op_desc& d;
  char* err;
  size_t err_len;
  int fail(int code, const char* fmt, ...) const {
    char body[768];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    return set_message(err, err_len, code, "%s: %s", op_name(d.op), body);
  }
};

}  // namespace

extern "C" {

FUSEDOPS_API int fusedops_parse_attributes(const fusedops_attributes* a, fusedops_op_desc* out, char* err,
                                           size_t err_len) {
  if (!a || !out) return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "attributes or output is NULL");
  if (a->op != FUSEDOPS_OP_GROUPNORM_ACT && a->op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "unknown op code %d", a->op);
  const char* op = op_name(a->op);
  fusedops_op_desc d{};
  d.op = a->op;
  fusedops_groupnorm_desc& gn = d.d.gn;
  if (a->num_groups <= 0 || a->num_groups > INT32_MAX)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "%s: num_groups must be positive (a 32-bit integer), got %lld", op,
                       static_cast<long long>(a->num_groups));
  gn.num_groups = static_cast<int32_t>(a->num_groups);
  if (!std::isfinite(a->epsilon) || a->epsilon < 0.f)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "%s: epsilon must be a finite non-negative number, got %g", op,
                       static_cast<double>(a->epsilon));
  gn.epsilon = a->epsilon;
  char msg[512] = {0};
  if (fusedops_parse_chain(a->pre ? a->pre : "", &gn.pre, msg, sizeof msg) != FUSEDOPS_OK)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: attribute 'pre': %s", op, msg);
  if (fusedops_parse_chain(a->post ? a->post : "", &gn.post, msg, sizeof msg) != FUSEDOPS_OK)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: attribute 'post': %s", op, msg);
  if (fusedops_parse_reduce(a->reduce ? a->reduce : "", &gn.reduce, msg, sizeof msg) != FUSEDOPS_OK)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: attribute 'reduce': %s", op, msg);
  if (a->op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT) {
    if (a->trans_b != 0 && a->trans_b != 1)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: trans_b must be 0 or 1, got %d",
                         op, a->trans_b);
    if (a->allow_tf32 != 0 && a->allow_tf32 != 1)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                         "%s: allow_tf32 must be 0 or 1, got %d", op, a->allow_tf32);
    d.d.trans_b = a->trans_b;
    d.d.allow_tf32 = a->allow_tf32;
  } else {
    d.d.trans_b = 1;
    d.d.allow_tf32 = 1;
  }
  gn.N = gn.C = gn.S = -1;
  d.d.K = a->op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT ? -1 : 0;
  gn.x_dtype = gn.param_dtype = FUSEDOPS_DTYPE_UNKNOWN;
  *out = d;
  return FUSEDOPS_OK;
}

FUSEDOPS_API int fusedops_describe(fusedops_op_desc* desc, const fusedops_tensor_desc* in, int32_t num_inputs,
                                   fusedops_tensor_desc* output, char* err, size_t err_len) {
  if (!desc || !output || (num_inputs > 0 && !in))
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "descriptor, inputs or output is NULL");
  if (desc->op != FUSEDOPS_OP_GROUPNORM_ACT && desc->op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "unknown op code %d", desc->op);
  const bool gemm = desc->op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT;
  const Rules r{*desc, err, err_len};
  fusedops_groupnorm_desc& gn = desc->d.gn;
  const int32_t fixed = gemm ? FUSEDOPS_GEMM_GROUPNORM_ACT_NUM_INPUTS : FUSEDOPS_GROUPNORM_ACT_NUM_INPUTS;
  const char* fixed_names = gemm ? FUSEDOPS_GEMM_GROUPNORM_ACT_INPUTS_TEXT : FUSEDOPS_GROUPNORM_ACT_INPUTS_TEXT;
  const int32_t need = fusedops_num_extras(&gn.pre, &gn.post);
  if (num_inputs < fixed)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "%d inputs given; expected at least %d (%s)", num_inputs, fixed,
                  fixed_names);
  if (num_inputs < fixed + need)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT,
                  "chains reference %d extra input(s) (@0..@%d), got %d (inputs: %s, then the extras)", need, need - 1,
                  num_inputs - fixed > 0 ? num_inputs - fixed : 0, fixed_names);
  if (num_inputs > fixed + FUSEDOPS_MAX_EXTRAS)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "%d extra inputs given; at most %d are supported",
                  num_inputs - fixed, FUSEDOPS_MAX_EXTRAS);
  for (int32_t i = 0; i < num_inputs; ++i)
    if (in[i].rank > FUSEDOPS_MAX_RANK)
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "input %d has rank %d; at most %d is supported", i, in[i].rank,
                    FUSEDOPS_MAX_RANK);

  const fusedops_tensor_desc& X = in[0];
  if (X.dtype != FUSEDOPS_DTYPE_UNKNOWN && !dtype_ok(X.dtype))
    return r.fail(FUSEDOPS_ERR_UNSUPPORTED, "X has %s; supported: float32, float16, bfloat16", dtype_name(X.dtype));
  const int64_t x_numel = numel(X);
  if (x_numel > kMaxElements)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "X of shape %s is too large", shape_text(X).c_str());

  // N, C, S, K and the output shape.
  int64_t N = -1, C = -1, S = -1, K = gemm ? -1 : 0;
  fusedops_tensor_desc y{};
  y.dtype = X.dtype;
  y.rank = X.rank;
  if (!gemm) {
    if (X.rank >= 0 && (X.rank < FUSEDOPS_GROUPNORM_ACT_X_MIN_RANK || X.rank > FUSEDOPS_GROUPNORM_ACT_X_MAX_RANK))
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "X must have rank %d-%d (N, C, *spatial), got shape %s",
                    FUSEDOPS_GROUPNORM_ACT_X_MIN_RANK, FUSEDOPS_GROUPNORM_ACT_X_MAX_RANK, shape_text(X).c_str());
    if (X.rank >= FUSEDOPS_GROUPNORM_ACT_X_MIN_RANK) {
      N = X.dims[0];
      C = X.dims[1];
      S = product(X, 2, X.rank);
      for (int32_t i = 0; i < X.rank; ++i) y.dims[i] = X.dims[i];
      if (gn.reduce != FUSEDOPS_REDUCE_NONE) y.dims[1] = 1;
    }
  } else {
    const fusedops_tensor_desc& W = in[1];
    if (X.rank >= 0 && X.rank < FUSEDOPS_GEMM_GROUPNORM_ACT_X_MIN_RANK)
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "X must have rank >= %d (rows, K), got shape %s",
                    FUSEDOPS_GEMM_GROUPNORM_ACT_X_MIN_RANK, shape_text(X).c_str());
    if (W.rank >= 0 && W.rank != 2)
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "W must be 2-D, got shape %s", shape_text(W).c_str());
    if (W.dtype != FUSEDOPS_DTYPE_UNKNOWN && X.dtype != FUSEDOPS_DTYPE_UNKNOWN && W.dtype != X.dtype)
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "W has %s but X has %s; they must match", dtype_name(W.dtype),
                    dtype_name(X.dtype));
    if (numel(W) > kMaxElements)
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "W of shape %s is too large", shape_text(W).c_str());
    if (X.rank >= FUSEDOPS_GEMM_GROUPNORM_ACT_X_MIN_RANK) {
      K = X.dims[X.rank - 1];
      N = product(X, 0, X.rank - 1);
    }
    S = 1;
    if (W.rank == 2) {
      const int64_t wk = desc->d.trans_b ? W.dims[1] : W.dims[0];
      C = desc->d.trans_b ? W.dims[0] : W.dims[1];
      if (K >= 0 && wk >= 0 && wk != K)
        return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT,
                      "X has K=%lld features but W of shape %s (trans_b=%d) expects %lld", static_cast<long long>(K),
                      shape_text(W).c_str(), desc->d.trans_b, static_cast<long long>(wk));
      if (K < 0 && wk >= 0) K = wk;
    }
    if (X.rank >= FUSEDOPS_GEMM_GROUPNORM_ACT_X_MIN_RANK) {
      for (int32_t i = 0; i + 1 < X.rank; ++i) y.dims[i] = X.dims[i];
      y.dims[X.rank - 1] = gn.reduce != FUSEDOPS_REDUCE_NONE ? 1 : C;
    }
  }
  if (C == 0) return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "C (the channel count) must be positive, got 0");

  // Per-channel inputs: C elements each, one dtype among them (float32 or X's).
  int32_t param_dtype = FUSEDOPS_DTYPE_UNKNOWN;
  const int32_t first_param = gemm ? 2 : 1;
  for (int32_t i = first_param; i < num_inputs; ++i) {
    std::string name = gemm ? (i == 2 ? "bias B" : i == 3 ? "gamma" : i == 4 ? "beta" : "")
                            : (i == 1 ? "gamma" : i == 2 ? "beta" : "");
    if (name.empty()) name = "extra input " + std::to_string(i - fixed);
    const fusedops_tensor_desc& t = in[i];
    if (t.dtype != FUSEDOPS_DTYPE_UNKNOWN && !dtype_ok(t.dtype))
      return r.fail(FUSEDOPS_ERR_UNSUPPORTED, "%s has %s; supported: float32, float16, bfloat16", name.c_str(),
                    dtype_name(t.dtype));
    if (t.dtype != FUSEDOPS_DTYPE_UNKNOWN) {
      if (param_dtype == FUSEDOPS_DTYPE_UNKNOWN) {
        param_dtype = t.dtype;
      } else if (t.dtype != param_dtype) {
        return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT,
                      "%s has %s but the other per-channel inputs have %s; they must share one dtype", name.c_str(),
                      dtype_name(t.dtype), dtype_name(param_dtype));
      }
    }
    const int64_t n = numel(t);
    if (n >= 0 && C >= 0 && n != C)
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "%s has %lld elements, expected C=%lld (one per channel)", name.c_str(),
                    static_cast<long long>(n), static_cast<long long>(C));
    if (n > kMaxElements) return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "%s is too large", name.c_str());
  }
  if (param_dtype != FUSEDOPS_DTYPE_UNKNOWN && X.dtype != FUSEDOPS_DTYPE_UNKNOWN && param_dtype != FUSEDOPS_F32 &&
      param_dtype != X.dtype)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT,
                  "the per-channel inputs have %s; with X in %s they must be float32 or %s", dtype_name(param_dtype),
                  dtype_name(X.dtype), dtype_name(X.dtype));
  if (C > 0 && C % gn.num_groups != 0)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "C=%lld is not divisible by num_groups=%d", static_cast<long long>(C),
                  gn.num_groups);
  if (N > kMaxElements || S > kMaxElements || C > kMaxElements ||
      (N > 0 && C > 0 && S > 0 && static_cast<double>(N) * static_cast<double>(C) * static_cast<double>(S) >
                                      static_cast<double>(kMaxElements)))
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "the output of N=%lld x C=%lld x S=%lld elements is too large",
                  static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(S));

  gn.N = N;
  gn.C = C;
  gn.S = S;
  desc->d.K = K;
  gn.x_dtype = X.dtype;
  gn.param_dtype = param_dtype;
  *output = y;
  return FUSEDOPS_OK;
}

}  // extern "C"
