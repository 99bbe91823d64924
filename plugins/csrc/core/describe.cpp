// Attribute parsing and the ops' shape/dtype rules: the one copy every adapter (PyTorch, ONNX Runtime, TensorRT)
// uses, so they accept and reject the same nodes with the same messages.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "core/conv_rules.h"
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

// ConvTransposeGroupNormAct's shapes: X (N, Cin, *spatial) and W (Cin, C / group, *kernel) with ONNX ConvTranspose's
// rules; completes cv (input, output, kernel, in_channels, spatial rank) and gives N, C, S and Y's shape (-1 where
// unknown).
int describe_conv(const Rules& r, const fusedops_tensor_desc& X, const fusedops_tensor_desc& W, fusedops_conv_desc& cv,
                  bool reduce, int64_t* N, int64_t* C, int64_t* S, fusedops_tensor_desc* y) {
  if (X.rank >= 0 && (X.rank < 3 || X.rank > 4))
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "X must be (N, Cin, *spatial) with 1 or 2 spatial dims, got shape %s",
                  shape_text(X).c_str());
  if (W.rank >= 0 && (W.rank < 3 || W.rank > 4))
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT,
                  "W must be (Cin, C / group, *kernel) with 1 or 2 spatial dims, got shape %s", shape_text(W).c_str());
  if (X.rank >= 0 && W.rank >= 0 && X.rank != W.rank)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "X %s and W %s must have the same number of spatial dims",
                  shape_text(X).c_str(), shape_text(W).c_str());
  const int32_t rank = X.rank >= 0 ? X.rank - 2 : W.rank >= 0 ? W.rank - 2 : cv.spatial_rank;
  if (cv.spatial_rank != 0 && rank != cv.spatial_rank)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "the convolution attributes are for %d spatial dims but X %s has %d",
                  cv.spatial_rank, shape_text(X).c_str(), rank);
  if (W.dtype != FUSEDOPS_DTYPE_UNKNOWN && X.dtype != FUSEDOPS_DTYPE_UNKNOWN && W.dtype != X.dtype)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "W has %s but X has %s; they must match", dtype_name(W.dtype),
                  dtype_name(X.dtype));
  if (numel(W) > kMaxElements)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "W of shape %s is too large", shape_text(W).c_str());
  int64_t cin = X.rank >= 3 ? X.dims[1] : -1;
  const int64_t w_cin = W.rank >= 3 ? W.dims[0] : -1;
  if (cin >= 0 && w_cin >= 0 && cin != w_cin)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT,
                  "X has %lld input channels but W %s (Cin, C / group, *kernel) has %lld", static_cast<long long>(cin),
                  shape_text(W).c_str(), static_cast<long long>(w_cin));
  if (cin < 0) cin = w_cin;
  if (cin > 0 && cin % cv.group != 0)
    return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "group=%d does not divide the %lld input channels", cv.group,
                  static_cast<long long>(cin));
  if (cin > INT32_MAX) return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "%lld input channels are too many",
                                     static_cast<long long>(cin));
  *N = X.rank >= 3 ? X.dims[0] : -1;
  *C = W.rank >= 3 && W.dims[1] >= 0 ? W.dims[1] * cv.group : -1;
  if (rank <= 0) {
    y->rank = -1;
    return FUSEDOPS_OK;
  }
  cv.spatial_rank = rank;
  cv.in_channels = cin;
  y->rank = rank + 2;
  y->dims[0] = *N;
  y->dims[1] = reduce ? 1 : *C;
  int64_t s = 1;
  for (int32_t i = 0; i < rank; ++i) {
    const int64_t wk = W.rank >= 3 ? W.dims[2 + i] : -1;
    if (cv.kernel[i] == 0 && wk > INT32_MAX)
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "W %s has a kernel too large", shape_text(W).c_str());
    if (cv.kernel[i] == 0 && wk >= 0) cv.kernel[i] = static_cast<int32_t>(wk);
    if (cv.kernel[i] != 0 && wk >= 0 && wk != cv.kernel[i])
      return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT,
                    "attribute 'kernel_shape' is %d for spatial dim %d but W %s has %lld", cv.kernel[i], i,
                    shape_text(W).c_str(), static_cast<long long>(wk));
    if (cv.kernel[i] != 0) {
      const char* problem = fusedops::core::convtranspose_dim_problem(cv.kernel[i], cv.strides[i], cv.dilations[i],
                                                                      cv.pads_begin[i], cv.pads_end[i],
                                                                      cv.output_padding[i]);
      if (problem) return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "spatial dim %d: %s", i, problem);
    }
    const int64_t in = X.rank >= 3 ? X.dims[2 + i] : -1;
    cv.input[i] = in;
    int64_t out = -1;
    if (in == 0) {
      out = 0;  // an empty input: an empty output, as for an empty batch
    } else if (in > 0 && cv.kernel[i] != 0) {
      out = fusedops::core::convtranspose_output_size(in, cv.kernel[i], cv.strides[i], cv.pads_begin[i],
                                                      cv.pads_end[i], cv.output_padding[i], cv.dilations[i]);
      if (out < 1)
        return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT,
                      "spatial dim %d: the output size is %lld (< 1) by ConvTranspose's rule: input %lld, kernel %d, "
                      "stride %d, pads %d/%d, output_padding %d, dilation %d",
                      i, static_cast<long long>(out), static_cast<long long>(in), cv.kernel[i], cv.strides[i],
                      cv.pads_begin[i], cv.pads_end[i], cv.output_padding[i], cv.dilations[i]);
      if (out > kMaxElements)
        return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "spatial dim %d: the output size %lld is too large", i,
                      static_cast<long long>(out));
    }
    cv.output[i] = out;
    y->dims[2 + i] = out;
    s = s < 0 || out < 0 ? -1 : s * out;
    if (s > kMaxElements) return r.fail(FUSEDOPS_ERR_INVALID_ARGUMENT, "the output's spatial size is too large");
  }
  *S = s;
  return FUSEDOPS_OK;
}

// ConvTransposeGroupNormAct's INTS attributes into cv: group, strides, pads, output_padding, dilations, any
// kernel_shape (0 = W's), and the spatial rank when a list gives it (0 = X's, at describe).
int parse_conv(const fusedops_conv_attributes& c, fusedops_conv_desc* cv, const char* op, char* err, size_t err_len) {
  *cv = fusedops_conv_desc{};
  if (c.group < 1 || c.group > INT32_MAX)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "%s: attribute 'group' must be in [1, 2147483647], got %lld", op, static_cast<long long>(c.group));
  cv->group = static_cast<int32_t>(c.group);
  struct List {
    const char* name;
    const int64_t* v;
    int32_t n, per_dim;
    int64_t lo;
  };
  const List lists[] = {{"kernel_shape", c.kernel_shape, c.num_kernel_shape, 1, 1},
                        {"strides", c.strides, c.num_strides, 1, 1},
                        {"pads", c.pads, c.num_pads, 2, 0},
                        {"output_padding", c.output_padding, c.num_output_padding, 1, 0},
                        {"dilations", c.dilations, c.num_dilations, 1, 1}};
  int32_t rank = 0;
  const char* rank_from = "";
  for (const List& l : lists) {
    if (l.n == 0) continue;
    if (l.n < 0 || !l.v)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "%s: attribute '%s': %d values but no data", op,
                         l.name, l.n);
    if (l.n % l.per_dim != 0 || l.n / l.per_dim < 1 || l.n / l.per_dim > 2)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                         "%s: attribute '%s' has %d values; expected %d per spatial dim%s, for 1 or 2 spatial dims",
                         op, l.name, l.n, l.per_dim, l.per_dim == 2 ? " (begins, then ends)" : "");
    if (rank != 0 && l.n / l.per_dim != rank)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                         "%s: attribute '%s' is for %d spatial dims but '%s' for %d", op, l.name, l.n / l.per_dim,
                         rank_from, rank);
    rank = l.n / l.per_dim;
    rank_from = l.name;
    for (int32_t i = 0; i < l.n; ++i)
      if (l.v[i] < l.lo || l.v[i] > INT32_MAX)
        return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                           "%s: attribute '%s' value %lld (index %d) must be in [%lld, 2147483647]", op, l.name,
                           static_cast<long long>(l.v[i]), i, static_cast<long long>(l.lo));
  }
  cv->spatial_rank = rank;
  for (int32_t i = 0; i < 3; ++i) {  // ONNX's defaults; given values below
    cv->strides[i] = 1;
    cv->dilations[i] = 1;
  }
  for (int32_t i = 0; i < rank; ++i) {
    if (c.num_kernel_shape) cv->kernel[i] = static_cast<int32_t>(c.kernel_shape[i]);
    if (c.num_strides) cv->strides[i] = static_cast<int32_t>(c.strides[i]);
    if (c.num_dilations) cv->dilations[i] = static_cast<int32_t>(c.dilations[i]);
    if (c.num_output_padding) cv->output_padding[i] = static_cast<int32_t>(c.output_padding[i]);
    if (c.num_pads) {
      cv->pads_begin[i] = static_cast<int32_t>(c.pads[i]);
      cv->pads_end[i] = static_cast<int32_t>(c.pads[rank + i]);
    }
    if (cv->output_padding[i] >= std::max(cv->strides[i], cv->dilations[i]))
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                         "%s: attribute 'output_padding' %d (spatial dim %d) must be below max(stride %d, dilation %d)",
                         op, cv->output_padding[i], i, cv->strides[i], cv->dilations[i]);
  }
  return FUSEDOPS_OK;
}

}  // namespace

extern "C" {

FUSEDOPS_API int fusedops_parse_attributes(const fusedops_attributes* a, fusedops_op_desc* out, char* err,
                                           size_t err_len) {
  if (!a || !out) return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "attributes or output is NULL");
  if (a->op != FUSEDOPS_OP_GROUPNORM_ACT && a->op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT &&
      a->op != FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT)
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
  } else if (a->op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT) {
    if (!a->conv)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                         "%s: the convolution attributes (fusedops_attributes.conv) are missing", op);
    if (a->allow_tf32 != 0 && a->allow_tf32 != 1)
      return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                         "%s: allow_tf32 must be 0 or 1, got %d", op, a->allow_tf32);
    const int rc = parse_conv(*a->conv, &d.conv, op, err, err_len);
    if (rc != FUSEDOPS_OK) return rc;
    d.d.trans_b = 1;
    d.d.allow_tf32 = a->allow_tf32;
  } else {
    d.d.trans_b = 1;
    d.d.allow_tf32 = 1;
  }
  gn.N = gn.C = gn.S = -1;
  d.d.K = a->op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT ? -1 : 0;  // ConvTransposeGroupNormAct: no GEMM K in d
  gn.x_dtype = gn.param_dtype = FUSEDOPS_DTYPE_UNKNOWN;
  *out = d;
  return FUSEDOPS_OK;
}

FUSEDOPS_API int fusedops_describe(fusedops_op_desc* desc, const fusedops_tensor_desc* in, int32_t num_inputs,
                                   fusedops_tensor_desc* output, char* err, size_t err_len) {
  if (!desc || !output || (num_inputs > 0 && !in))
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "descriptor, inputs or output is NULL");
  if (desc->op != FUSEDOPS_OP_GROUPNORM_ACT && desc->op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT &&
      desc->op != FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "unknown op code %d", desc->op);
  const bool conv = desc->op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT;
  const bool gemm = desc->op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT;
  const bool w_b_inputs = gemm || conv;  // X, W, B, gamma, beta
  const Rules r{*desc, err, err_len};
  fusedops_groupnorm_desc& gn = desc->d.gn;
  const int32_t fixed = w_b_inputs ? 5 : FUSEDOPS_GROUPNORM_ACT_NUM_INPUTS;
  const char* fixed_names = w_b_inputs ? "X, W, B, gamma, beta" : FUSEDOPS_GROUPNORM_ACT_INPUTS_TEXT;
  static_assert(FUSEDOPS_GEMM_GROUPNORM_ACT_NUM_INPUTS == 5, "GemmGroupNormAct's fixed inputs are X, W, B, gamma, beta");
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
  if (conv) {
    const int rc = describe_conv(r, X, in[1], desc->conv, gn.reduce != FUSEDOPS_REDUCE_NONE, &N, &C, &S, &y);
    if (rc != FUSEDOPS_OK) return rc;
  } else if (!gemm) {
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
  const int32_t first_param = w_b_inputs ? 2 : 1;
  for (int32_t i = first_param; i < num_inputs; ++i) {
    std::string name = w_b_inputs ? (i == 2 ? "bias B" : i == 3 ? "gamma" : i == 4 ? "beta" : "")
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
