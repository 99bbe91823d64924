// The PyTorch ops fusedops::group_norm_act, fusedops::gemm_group_norm_act and
// fusedops::convtranspose_group_norm_act, registered in C++ (TORCH_LIBRARY).
// A call is one dispatcher hop into this file: it looks up the plan cached for (attributes, shapes, dtypes, device),
// allocates the output and the workspace from PyTorch's allocator and runs the plan through the C ABI on the
// current stream. No Python, no ctypes, no parsing or heuristics after the first call of a configuration.
//
// fusedops/plugins/torch_ops.py adds the fake (meta) kernel and autograd in Python, as pytorch/extension-cpp does,
// and the float64 reference path (CPU only): float64 inputs are dispatched to fusedops::_reference_* ops that
// torch_ops.py defines with the catalog's reference math.
//
// Only device-generic c10 APIs are used (the stream through c10::Stream::native_handle), so the same source builds
// against CPU-only and CUDA builds of PyTorch.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fusedops/fusedops.h"
#include "prepared_weights.h"

namespace {

std::atomic<bool> g_poison_outputs{false};

// ---- dtypes -----------------------------------------------------------------------------------------------------

int32_t fusedops_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return FUSEDOPS_F32;
    case at::kHalf: return FUSEDOPS_F16;
    case at::kBFloat16: return FUSEDOPS_BF16;
    default: return FUSEDOPS_DTYPE_UNKNOWN;
  }
}

std::string torch_dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kDouble: return "torch.float64";
    case at::kLong: return "torch.int64";
    case at::kInt: return "torch.int32";
    case at::kBool: return "torch.bool";
    default: return std::string("torch.") + c10::toString(t);
  }
}

// ---- the call's tensors -----------------------------------------------------------------------------------------

// Inputs in node order (X, [W, B,] gamma, beta, extras...), contiguous, per-channel ones in one dtype.
struct Call {
  int32_t op;
  c10::SmallVector<at::Tensor, 5 + FUSEDOPS_MAX_EXTRAS> in;

  // GemmGroupNormAct and ConvTransposeGroupNormAct both take X, W, B before the GroupNorm parameters.
  bool weighted() const { return op != FUSEDOPS_OP_GROUPNORM_ACT; }
  const char* name() const {
    return op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT           ? "GemmGroupNormAct"
           : op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT ? "ConvTransposeGroupNormAct"
                                                           : "GroupNormAct";
  }
  size_t first_param() const { return weighted() ? 2 : 1; }
  // ConvTransposeGroupNormAct's B is optional (undefined: no bias; the kernels get a null pointer).
  bool may_be_absent(size_t i) const { return op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT && i == 2; }
  std::string label(size_t i) const {
    static const char* weighted_names[] = {"X", "W", "bias B", "gamma", "beta"};
    static const char* gn_names[] = {"X", "gamma", "beta"};
    const size_t fixed = weighted() ? 5 : 3;
    if (i < fixed) return weighted() ? weighted_names[i] : gn_names[i];
    return "extra input " + std::to_string(i - fixed);
  }
};

// Makes the inputs contiguous and gives the per-channel ones one dtype the kernels take (their own when they agree
// and it is float32 or X's dtype, float32 otherwise: a copy, only for mixed inputs). float64 X on the CPU is left to
// the reference op.
void normalise(Call& c) {
  const at::Tensor& x = c.in[0];
  const bool reference = x.scalar_type() == at::kDouble && x.is_cpu();
  for (size_t i = 0; i < c.in.size(); ++i) {
    at::Tensor& t = c.in[i];
    if (!t.defined() && c.may_be_absent(i)) continue;
    TORCH_CHECK_VALUE(t.defined(), c.name(), ": ", c.label(i), " is undefined");
    TORCH_CHECK_VALUE(t.device() == x.device(), c.name(), ": ", c.label(i), " is on ", t.device().str(),
                      " but X is on ", x.device().str());
    const at::ScalarType dt = t.scalar_type();
    TORCH_CHECK_VALUE(fusedops_dtype(dt) != FUSEDOPS_DTYPE_UNKNOWN || (reference && at::isFloatingType(dt)),
                      c.name(), ": ", c.label(i), " has dtype ", torch_dtype_name(dt),
                      "; supported: float32, float16, bfloat16", x.is_cpu() ? " (and float64 X on the CPU)" : "");
    if (!t.is_contiguous()) t = t.contiguous();
  }
  if (reference) return;
  size_t first = c.first_param();
  if (!c.in[first].defined()) ++first;  // an absent optional B
  const at::ScalarType pdt = c.in[first].scalar_type();
  bool same = true;
  for (size_t i = first + 1; i < c.in.size(); ++i) same = same && c.in[i].scalar_type() == pdt;
  if (!same || (pdt != at::kFloat && pdt != x.scalar_type()))
    for (size_t i = first; i < c.in.size(); ++i) c.in[i] = c.in[i].to(at::kFloat);
}

fusedops_tensor_desc tensor_desc(const at::Tensor& t) {
  fusedops_tensor_desc d{};
  if (!t.defined()) {  // an absent optional input: dtype and rank unknown
    d.dtype = FUSEDOPS_DTYPE_UNKNOWN;
    d.rank = -1;
    return d;
  }
  d.dtype = fusedops_dtype(t.scalar_type());
  d.rank = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim() && i < FUSEDOPS_MAX_RANK; ++i) d.dims[i] = t.size(i);
  return d;
}

// ---- plans, cached per configuration ----------------------------------------------------------------------------

struct Entry {
  fusedops_plan* plan = nullptr;
  std::vector<int64_t> out_shape;
  size_t workspace = 0;
  size_t prepared_weights = 0;  // bytes of W's prepared form the plan takes (3xTF32), 0: none
  ~Entry() { fusedops_plan_destroy(plan); }
};

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<Entry>> plans;
};
Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: plans may be in use during static destruction
  return *c;
}
constexpr size_t kMaxPlans = 4096;  // distinct configurations kept; beyond, the cache starts over

template <typename T>
void append(std::string& k, const T& v) {
  k.append(reinterpret_cast<const char*>(&v), sizeof v);
}

struct Attrs {
  int64_t num_groups;
  double epsilon;
  c10::string_view pre, post, reduce;
  int64_t trans_b, allow_tf32;
  const fusedops_conv_attributes* conv = nullptr;  // ConvTransposeGroupNormAct only
};

// ConvTransposeGroupNormAct's lists as the C ABI takes them (views of the op's int[] arguments).
fusedops_conv_attributes conv_attributes(c10::IntArrayRef strides, c10::IntArrayRef pads,
                                         c10::IntArrayRef output_padding, c10::IntArrayRef dilations, int64_t group) {
  fusedops_conv_attributes a{};
  a.strides = strides.data();
  a.num_strides = static_cast<int32_t>(strides.size());
  a.pads = pads.data();
  a.num_pads = static_cast<int32_t>(pads.size());
  a.output_padding = output_padding.data();
  a.num_output_padding = static_cast<int32_t>(output_padding.size());
  a.dilations = dilations.data();
  a.num_dilations = static_cast<int32_t>(dilations.size());
  a.group = group;
  return a;
}

// Everything the plan depends on: op, attributes, device, and every input's dtype and shape.
void build_key(std::string& k, const Call& c, const Attrs& a) {
  k.clear();
  append(k, c.op);
  append(k, a.num_groups);
  append(k, a.epsilon);
  append(k, a.trans_b);
  append(k, a.allow_tf32);
  const c10::Device dev = c.in[0].device();
  append(k, static_cast<int16_t>(dev.type()));
  append(k, static_cast<int16_t>(dev.index()));
  append(k, static_cast<int32_t>(c.in.size()));
  for (const at::Tensor& t : c.in) {
    if (!t.defined()) {  // an absent optional input
      append(k, static_cast<int8_t>(-1));
      continue;
    }
    append(k, static_cast<int8_t>(t.scalar_type()));
    append(k, static_cast<int8_t>(t.dim()));
    for (int64_t s : t.sizes()) append(k, s);
  }
  if (a.conv) {
    const fusedops_conv_attributes& cv = *a.conv;
    append(k, cv.group);
    for (auto [p, n] : {std::pair<const int64_t*, int32_t>{cv.strides, cv.num_strides}, {cv.pads, cv.num_pads},
                        {cv.output_padding, cv.num_output_padding}, {cv.dilations, cv.num_dilations}}) {
      append(k, n);
      if (n > 0) k.append(reinterpret_cast<const char*>(p), sizeof(int64_t) * static_cast<size_t>(n));
    }
  }
  for (c10::string_view s : {a.pre, a.post, a.reduce}) {
    append(k, static_cast<uint32_t>(s.size()));
    k.append(s.data(), s.size());
  }
}

[[noreturn]] void fail(const Call& c, int rc, const char* msg) {
  if (rc == FUSEDOPS_ERR_CUDA || rc == FUSEDOPS_ERR_NOT_BUILT) TORCH_CHECK(false, c.name(), ": ", msg);
  TORCH_CHECK_VALUE(false, msg);
}

std::shared_ptr<Entry> make_entry(const Call& c, const Attrs& a) {
  const std::string pre(a.pre), post(a.post), reduce(a.reduce);
  fusedops_attributes fa{};
  fa.op = c.op;
  fa.num_groups = a.num_groups;
  fa.epsilon = static_cast<float>(a.epsilon);
  fa.pre = pre.c_str();
  fa.post = post.c_str();
  fa.reduce = reduce.c_str();
  // Out-of-range values saturate (and are then rejected by the library, never silently truncated to 0 or 1).
  const auto i32 = [](int64_t v) {
    return static_cast<int32_t>(std::max<int64_t>(INT32_MIN, std::min<int64_t>(v, INT32_MAX)));
  };
  fa.trans_b = i32(a.trans_b);
  fa.allow_tf32 = i32(a.allow_tf32);
  fa.conv = a.conv;
  char err[1024] = {0};
  fusedops_op_desc d{};
  int rc = fusedops_parse_attributes(&fa, &d, err, sizeof err);
  if (rc != FUSEDOPS_OK) fail(c, rc, err);
  std::vector<fusedops_tensor_desc> in;
  for (const at::Tensor& t : c.in) {
    if (t.dim() > FUSEDOPS_MAX_RANK)
      TORCH_CHECK_VALUE(false, c.name(), ": a tensor of rank ", t.dim(), " (at most ", FUSEDOPS_MAX_RANK, ")");
    in.push_back(tensor_desc(t));
  }
  fusedops_tensor_desc out{};
  rc = fusedops_describe(&d, in.data(), static_cast<int32_t>(in.size()), &out, err, sizeof err);
  if (rc != FUSEDOPS_OK) fail(c, rc, err);
  auto e = std::make_shared<Entry>();
  const c10::Device dev = c.in[0].device();
  TORCH_CHECK_VALUE(dev.is_cpu() || dev.is_cuda(), c.name(), ": tensors on ", dev.str(), " are not supported");
  const int32_t device = dev.is_cuda() ? dev.index() : FUSEDOPS_DEVICE_CPU;
  rc = fusedops_plan_create(&d, device, nullptr, &e->plan, err, sizeof err);
  if (rc != FUSEDOPS_OK) fail(c, rc, err);
  e->out_shape.assign(out.dims, out.dims + out.rank);
  e->workspace = fusedops_plan_workspace_size(e->plan);
  e->prepared_weights = fusedops_plan_prepared_weights_size(e->plan);
  return e;
}

std::shared_ptr<Entry> plan_for(const Call& c, const Attrs& a) {
  thread_local std::string key;
  build_key(key, c, a);
  Cache& cc = cache();
  {
    std::lock_guard<std::mutex> lock(cc.mu);
    auto it = cc.plans.find(key);
    if (it != cc.plans.end()) return it->second;
  }
  std::shared_ptr<Entry> e = make_entry(c, a);  // outside the lock: planning may take milliseconds
  std::lock_guard<std::mutex> lock(cc.mu);
  if (cc.plans.size() >= kMaxPlans) cc.plans.clear();
  return cc.plans.emplace(key, e).first->second;
}

// ---- running ------------------------------------------------------------------------------------------------------

at::Tensor allocate(c10::IntArrayRef shape, const at::TensorOptions& o, bool poison, double fill) {
  at::Tensor t = at::empty(shape, o);
  if (poison) t.fill_(fill);
  return t;
}

// `user_w`: the caller's W before normalise (its own tensor, not a contiguous copy, is what a prepared form is kept
// for; undefined for ops without one).
at::Tensor run(const Call& c, const Attrs& a, const at::Tensor& user_w = at::Tensor()) {
  const at::Tensor& x = c.in[0];
  const std::shared_ptr<Entry> e = plan_for(c, a);
  // The plan's device current for the allocations (PyTorch's caching allocator serves the current device and
  // stream) and for the run.
  c10::OptionalDeviceGuard guard;
  void* stream = nullptr;
  at::Tensor prepared;
  if (x.is_cuda()) {
    guard.reset_device(x.device());
    const c10::impl::VirtualGuardImpl impl(x.device().type());
    const c10::Stream s = impl.getStream(x.device());
    stream = s.native_handle();
    if (e->prepared_weights > 0 && user_w.defined() && user_w.is_same(c.in[1]))
      prepared = fusedops_torch::prepared_weights_for(e->plan, e->prepared_weights, user_w, s);
  }
  const bool poison = g_poison_outputs.load(std::memory_order_relaxed);
  at::Tensor y = allocate(e->out_shape, x.options(), poison, std::numeric_limits<double>::quiet_NaN());
  if (y.numel() == 0) return y;
  // The workspace straight from the device's allocator: a tensor around it would cost a TensorImpl per call.
  // Freed (stream-ordered) when this call returns, like any temporary of an eager op. Poisoned runs fill it.
  at::Tensor ws_tensor;
  c10::DataPtr ws;
  void* ws_ptr = nullptr;
  if (e->workspace > 0) {
    if (poison) {
      ws_tensor = allocate({static_cast<int64_t>(e->workspace)}, x.options().dtype(at::kByte), true, 255.0);
      ws_ptr = ws_tensor.data_ptr();
    } else {
      ws = c10::GetAllocator(x.device().type())->allocate(e->workspace);
      ws_ptr = ws.get();
    }
  }
  const void* ptrs[5 + FUSEDOPS_MAX_EXTRAS];
  for (size_t i = 0; i < c.in.size(); ++i) ptrs[i] = c.in[i].defined() ? c.in[i].data_ptr() : nullptr;
  char err[1024] = {0};
  const int rc = fusedops_plan_run_prepared(e->plan, ptrs, static_cast<int32_t>(c.in.size()),
                                            prepared.defined() ? prepared.data_ptr() : nullptr, y.data_ptr(), ws_ptr,
                                            e->workspace, static_cast<fusedops_stream_t>(stream), err, sizeof err);
  if (rc != FUSEDOPS_OK) fail(c, rc, err);
  return y;
}

// -1 follows torch.get_float32_matmul_precision() ("highest" = strict FP32); anything else goes to the library's
// attribute rules as given (which reject what is not 0 or 1).
int64_t resolve_allow_tf32(int64_t allow_tf32) {
  if (allow_tf32 != -1) return allow_tf32;
  return at::globalContext().float32MatmulPrecision() == at::Float32MatmulPrecision::HIGHEST ? 0 : 1;
}

Call make_call(int32_t op, std::initializer_list<at::Tensor> fixed, at::TensorList extras) {
  Call c{op, {}};
  TORCH_CHECK_VALUE(extras.size() <= FUSEDOPS_MAX_EXTRAS, c.name(), ": ", extras.size(),
                    " extra inputs; at most ", FUSEDOPS_MAX_EXTRAS, " are supported");
  for (const at::Tensor& t : fixed) c.in.push_back(t);
  for (const at::Tensor& t : extras) c.in.push_back(t);
  return c;
}

at::Tensor group_norm_act(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta,
                          at::TensorList extras, int64_t num_groups, double epsilon, c10::string_view pre,
                          c10::string_view post, c10::string_view reduce) {
  Call c = make_call(FUSEDOPS_OP_GROUPNORM_ACT, {x, gamma, beta}, extras);
  normalise(c);
  if (x.scalar_type() == at::kDouble) {
    static const auto ref = c10::Dispatcher::singleton()
                                .findSchemaOrThrow("fusedops::_reference_group_norm_act", "")
                                .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                  at::TensorList, int64_t, double, c10::string_view,
                                                  c10::string_view, c10::string_view)>();
    return ref.call(x, gamma, beta, extras, num_groups, epsilon, pre, post, reduce);
  }
  return run(c, Attrs{num_groups, epsilon, pre, post, reduce, 1, 1});
}

at::Tensor gemm_group_norm_act(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                               const at::Tensor& gamma, const at::Tensor& beta, at::TensorList extras,
                               int64_t num_groups, double epsilon, c10::string_view pre, c10::string_view post,
                               c10::string_view reduce, int64_t trans_b, int64_t allow_tf32) {
  Call c = make_call(FUSEDOPS_OP_GEMM_GROUPNORM_ACT, {x, w, b, gamma, beta}, extras);
  const int64_t tf32 = resolve_allow_tf32(allow_tf32);
  normalise(c);
  if (x.scalar_type() == at::kDouble) {
    static const auto ref = c10::Dispatcher::singleton()
                                .findSchemaOrThrow("fusedops::_reference_gemm_group_norm_act", "")
                                .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                  const at::Tensor&, const at::Tensor&, at::TensorList, int64_t,
                                                  double, c10::string_view, c10::string_view, c10::string_view,
                                                  int64_t, int64_t)>();
    return ref.call(x, w, b, gamma, beta, extras, num_groups, epsilon, pre, post, reduce, trans_b, tf32);
  }
  return run(c, Attrs{num_groups, epsilon, pre, post, reduce, trans_b, tf32}, w);
}

at::Tensor convtranspose_group_norm_act(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b,
                                       const at::Tensor& gamma, const at::Tensor& beta, at::TensorList extras,
                                       int64_t num_groups, c10::IntArrayRef strides, c10::IntArrayRef pads,
                                       c10::IntArrayRef output_padding, c10::IntArrayRef dilations, int64_t group,
                                       double epsilon, c10::string_view pre, c10::string_view post,
                                       c10::string_view reduce, int64_t allow_tf32) {
  Call c = make_call(FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT, {x, w, b.value_or(at::Tensor()), gamma, beta}, extras);
  const int64_t tf32 = resolve_allow_tf32(allow_tf32);
  normalise(c);
  if (x.scalar_type() == at::kDouble) {
    static const auto ref =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("fusedops::_reference_convtranspose_group_norm_act", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                              const at::Tensor&, const at::Tensor&, at::TensorList, int64_t, c10::IntArrayRef,
                              c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, int64_t, double,
                              c10::string_view, c10::string_view, c10::string_view, int64_t)>();
    return ref.call(x, w, b, gamma, beta, extras, num_groups, strides, pads, output_padding, dilations, group,
                    epsilon, pre, post, reduce, tf32);
  }
  const fusedops_conv_attributes conv = conv_attributes(strides, pads, output_padding, dilations, group);
  return run(c, Attrs{num_groups, epsilon, pre, post, reduce, 1, tf32, &conv});
}

// ---- test and report hooks ----------------------------------------------------------------------------------------

// The kernels the plan for these arguments runs (the plan is made and cached as a call would).
std::string plan_kernels(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& gamma,
                         const at::Tensor& beta, at::TensorList extras, int64_t num_groups, double epsilon,
                         c10::string_view pre, c10::string_view post, c10::string_view reduce, int64_t trans_b,
                         int64_t allow_tf32) {
  const bool gemm = w.defined() && w.numel() > 0;
  Call c = gemm ? make_call(FUSEDOPS_OP_GEMM_GROUPNORM_ACT, {x, w, b, gamma, beta}, extras)
                : make_call(FUSEDOPS_OP_GROUPNORM_ACT, {x, gamma, beta}, extras);
  normalise(c);
  const int64_t tf32 = gemm ? resolve_allow_tf32(allow_tf32) : 1;
  return fusedops_plan_kernels(plan_for(c, Attrs{num_groups, epsilon, pre, post, reduce, gemm ? trans_b : 1, tf32})
                                   ->plan);
}

int64_t plan_cache_size() {
  Cache& cc = cache();
  std::lock_guard<std::mutex> lock(cc.mu);
  return static_cast<int64_t>(cc.plans.size());
}

void set_poison_outputs(bool on) { g_poison_outputs.store(on); }

}  // namespace

TORCH_LIBRARY(fusedops, m) {
  m.set_python_module("fusedops.plugins.torch_ops");
  m.def(
      "group_norm_act(Tensor x, Tensor gamma, Tensor beta, Tensor[] extras, int num_groups, float epsilon=1e-05, "
      "str pre=\"\", str post=\"\", str reduce=\"\") -> Tensor");
  m.def(
      "gemm_group_norm_act(Tensor x, Tensor w, Tensor b, Tensor gamma, Tensor beta, Tensor[] extras, "
      "int num_groups, float epsilon=1e-05, str pre=\"\", str post=\"\", str reduce=\"\", int trans_b=1, "
      "int allow_tf32=-1) -> Tensor");
  m.def(
      "convtranspose_group_norm_act(Tensor x, Tensor w, Tensor? b, Tensor gamma, Tensor beta, Tensor[] extras, "
      "int num_groups, int[] strides=[], int[] pads=[], int[] output_padding=[], int[] dilations=[], int group=1, "
      "float epsilon=1e-05, str pre=\"\", str post=\"\", str reduce=\"\", int allow_tf32=-1) -> Tensor");
  // Test and report hooks (not part of the user API).
  m.def(
      "_plan_kernels(Tensor x, Tensor w, Tensor b, Tensor gamma, Tensor beta, Tensor[] extras, int num_groups, "
      "float epsilon, str pre, str post, str reduce, int trans_b, int allow_tf32) -> str",
      &plan_kernels);
  m.def("_plan_cache_size() -> int", &plan_cache_size);
  m.def("_set_poison_outputs(bool on) -> ()", &set_poison_outputs);
  // W split once for 3xTF32 plans (prepared_weights.h): on by default.
  m.def("_set_prepared_weights(bool on) -> ()", &fusedops_torch::set_prepared_weights);
  m.def("_forget_prepared_weights() -> ()", &fusedops_torch::forget_prepared_weights);
  m.def("_prepared_weights_count() -> int", &fusedops_torch::prepared_weights_count);
}

TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("group_norm_act", &group_norm_act);
  m.impl("gemm_group_norm_act", &gemm_group_norm_act);
  m.impl("convtranspose_group_norm_act", &convtranspose_group_norm_act);
}

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("group_norm_act", &group_norm_act);
  m.impl("gemm_group_norm_act", &gemm_group_norm_act);
  m.impl("convtranspose_group_norm_act", &convtranspose_group_norm_act);
}
