// ONNX Runtime custom-op library for the fusedops domain: GroupNormAct and GemmGroupNormAct on the CPU EP (the core's
// CPU kernels) and, in CUDA builds, the CUDA EP (the C ABI's CUDA entries on ORT's compute stream).
//
// Written against the ORT C API version 21 (ORT 1.21+): RegisterCustomOps asks for GetApi(21), so the library loads
// on every ORT from 1.21 to at least 1.31. Only the C API is used, so no C++ exception can cross into ORT: kernels
// are created and run through CreateKernelV2 / KernelComputeV2, which report every error as an OrtStatus naming the
// node and the problem. Attribute errors, and shape errors the graph's static shapes already show, surface at
// session creation (kernel construction); the rest at run.
//
// Registration: one OrtCustomOp per (op, X type, parameter type, execution provider); ORT merges the kernels of one
// op name into one schema with type constraints, so every combination the fuser can emit resolves to a kernel:
// X ∈ {float, float16, bfloat16}, parameters (W is X's type; B, gamma, beta, extras) of X's type or float.
// The extras extra_0.. are one homogeneous variadic input (min arity 0): a node has exactly the extras its chains
// reference, as the catalog's ONNX function has, and no dummy optional slots.
#include <atomic>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cpu_util.h"  // the core's scheduler hook (internal C++, linked statically)
#include "fusedops/fusedops.h"
#include "onnxruntime_c_api.h"

#if defined(_WIN32)
#define FUSEDOPS_ORT_EXPORT __declspec(dllexport)
#else
#define FUSEDOPS_ORT_EXPORT __attribute__((visibility("default")))
#endif

namespace {

constexpr uint32_t kOrtApiVersion = 21;
constexpr const char* kDomain = "fusedops";
constexpr const char* kCpuEP = "CPUExecutionProvider";
constexpr const char* kCudaEP = "CUDAExecutionProvider";
constexpr const char* kConfigAllowTf32 = "fusedops.allow_tf32";

std::atomic<int64_t> g_cpu_calls{0};
std::atomic<int64_t> g_cuda_calls{0};

enum class OpKind { kGroupNormAct, kGemmGroupNormAct };

struct OpConfig {
  OpKind kind;
  ONNXTensorElementDataType x_type;
  ONNXTensorElementDataType param_type;
  bool cuda;
  int allow_tf32_override;  // -1: use the node attribute; 0/1: session config fusedops.allow_tf32
};

int32_t to_fusedops_dtype(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return FUSEDOPS_F16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return FUSEDOPS_BF16;
    default: return FUSEDOPS_F32;
  }
}

const char* op_name(OpKind k) { return k == OpKind::kGroupNormAct ? "GroupNormAct" : "GemmGroupNormAct"; }

#define FUSEDOPS_ORT_CHECK(expr)    \
  do {                              \
    OrtStatus* _st = (expr);        \
    if (_st) return _st;            \
  } while (0)

// Kernel: parsed attributes (at session creation) + the descriptor template.
struct Kernel {
  const OrtApi* api;
  OpConfig cfg;
  std::string node;  // node name, for error messages
  fusedops_groupnorm_desc gn{};
  int32_t trans_b = 1;
  int32_t allow_tf32 = 1;
  int32_t num_extras = 0;
  size_t num_fixed_inputs = 0;

  std::string where() const { return std::string("fusedops ") + op_name(cfg.kind) + " node '" + node + "': "; }
  OrtStatus* error(const std::string& what) const {
    return api->CreateStatus(ORT_INVALID_ARGUMENT, (where() + what).c_str());
  }
};

// ---- attribute helpers ----
// A missing attribute keeps the caller's default (ORT does not pass function-level defaults to kernels); one that is
// present with another type is an error, never a silent default.
bool ok(const OrtApi* api, OrtStatus* st) {
  if (!st) return true;
  api->ReleaseStatus(st);
  return false;
}

// ORT's typed getters fail with the same code for "absent" and "other type"; probing the other getters tells them
// apart without depending on message text. The array getters do not check the type (any present attribute reads
// as a list, empty unless it is one), so they serve as the presence test for the remaining types. Returns the
// attribute's type for the message, or nullptr when it is absent.
const char* present_type(const OrtApi* api, const OrtKernelInfo* info, const char* name, const std::string& failure) {
  int64_t i = 0;
  float f = 0.f;
  size_t n = 0;
  if (ok(api, api->KernelInfoGetAttribute_int64(info, name, &i))) return "INT";
  if (ok(api, api->KernelInfoGetAttribute_float(info, name, &f))) return "FLOAT";
  if (ok(api, api->KernelInfoGetAttribute_string(info, name, nullptr, &n))) return "STRING";
  n = 0;
  if (ok(api, api->KernelInfoGetAttributeArray_float(info, name, nullptr, &n)) && n > 0) return "FLOATS";
  n = 0;
  const bool present = ok(api, api->KernelInfoGetAttributeArray_int64(info, name, nullptr, &n));
  if (present && n > 0) return "INTS";
  if (present || failure.find("type don't match") != std::string::npos) return "a list or another non-scalar type";
  return nullptr;
}

// Reads `name` into *out when present with `type` (*present = true); absent leaves *out (*present = false).
template <typename Get>
OrtStatus* read_attr(const Kernel& k, const OrtKernelInfo* info, const char* name, const char* type, bool* present,
                     Get get) {
  *present = false;
  OrtStatus* st = get();
  if (!st) {
    *present = true;
    return nullptr;
  }
  const std::string failure = k.api->GetErrorMessage(st);
  k.api->ReleaseStatus(st);
  if (const char* actual = present_type(k.api, info, name, failure))
    return k.error(std::string("attribute '") + name + "' must be " + type + ", got " + actual);
  return nullptr;
}
OrtStatus* attr_int(const Kernel& k, const OrtKernelInfo* info, const char* name, int64_t* out,
                    bool* present = nullptr) {
  bool p = false;
  int64_t v = 0;
  OrtStatus* st =
      read_attr(k, info, name, "INT", &p, [&] { return k.api->KernelInfoGetAttribute_int64(info, name, &v); });
  if (p) *out = v;
  if (present) *present = p;
  return st;
}
OrtStatus* attr_float(const Kernel& k, const OrtKernelInfo* info, const char* name, float* out) {
  bool p = false;
  float v = 0.f;
  OrtStatus* st =
      read_attr(k, info, name, "FLOAT", &p, [&] { return k.api->KernelInfoGetAttribute_float(info, name, &v); });
  if (p) *out = v;
  return st;
}
OrtStatus* attr_string(const Kernel& k, const OrtKernelInfo* info, const char* name, std::string* out,
                       bool* present = nullptr) {
  bool p = false;
  size_t size = 0;
  OrtStatus* st = read_attr(k, info, name, "STRING", &p,
                            [&] { return k.api->KernelInfoGetAttribute_string(info, name, nullptr, &size); });
  if (present) *present = p;
  if (st || !p) return st;
  std::string s(size, '\0');
  FUSEDOPS_ORT_CHECK(k.api->KernelInfoGetAttribute_string(info, name, &s[0], &size));
  s.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  *out = s;
  return nullptr;
}

std::string node_name(const OrtApi* api, const OrtKernelInfo* info) {
  size_t size = 0;
  OrtStatus* st = api->KernelInfo_GetNodeName(info, nullptr, &size);
  if (st) {
    api->ReleaseStatus(st);
    return "?";
  }
  std::string s(size, '\0');
  st = api->KernelInfo_GetNodeName(info, &s[0], &size);
  if (st) {
    api->ReleaseStatus(st);
    return "?";
  }
  s.resize(size > 0 ? size - 1 : 0);
  return s;
}

OrtStatus* ORT_API_CALL create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info,
                                      void** out);
OrtStatus* ORT_API_CALL compute(void* kernel, OrtKernelContext* ctx);

// One registered op: the OrtCustomOp table followed by its configuration (the table is the first member, so ORT's
// `const OrtCustomOp*` is also our object).
struct FusedCustomOp {
  OrtCustomOp base;
  OpConfig cfg;

  explicit FusedCustomOp(const OpConfig& c) : base{}, cfg(c) {
    base.version = kOrtApiVersion;
    base.CreateKernel = nullptr;  // V2 entries below (status-returning)
    base.GetName = [](const OrtCustomOp* o) { return op_name(self(o)->cfg.kind); };
    base.GetExecutionProviderType = [](const OrtCustomOp* o) { return self(o)->cfg.cuda ? kCudaEP : kCpuEP; };
    base.GetInputType = [](const OrtCustomOp* o, size_t i) {
      const OpConfig& c = self(o)->cfg;
      if (c.kind == OpKind::kGemmGroupNormAct) return i <= 1 ? c.x_type : c.param_type;  // X, W | B, gamma, ...
      return i == 0 ? c.x_type : c.param_type;                                           // X | gamma, beta, ...
    };
    base.GetInputTypeCount = [](const OrtCustomOp* o) { return fixed_inputs(self(o)->cfg.kind) + 1; };
    base.GetOutputType = [](const OrtCustomOp* o, size_t) { return self(o)->cfg.x_type; };
    base.GetOutputTypeCount = [](const OrtCustomOp*) { return size_t{1}; };
    base.KernelCompute = nullptr;
    base.KernelDestroy = [](void* k) { delete static_cast<Kernel*>(k); };
    base.GetInputCharacteristic = [](const OrtCustomOp* o, size_t i) {
      return i < fixed_inputs(self(o)->cfg.kind) ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_VARIADIC;
    };
    base.GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    base.GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
    base.GetVariadicInputMinArity = [](const OrtCustomOp*) { return 0; };
    base.GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
    base.GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
    base.GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 0; };
    base.CreateKernelV2 = create_kernel;
    base.KernelComputeV2 = compute;
    base.InferOutputShapeFn = nullptr;
    base.GetStartVersion = [](const OrtCustomOp*) { return 1; };
    base.GetEndVersion = [](const OrtCustomOp*) { return 2147483647; };
    base.GetMayInplace = nullptr;
    base.ReleaseMayInplace = nullptr;
    base.GetAliasMap = nullptr;
    base.ReleaseAliasMap = nullptr;
  }
  static const FusedCustomOp* self(const OrtCustomOp* o) { return reinterpret_cast<const FusedCustomOp*>(o); }
  static size_t fixed_inputs(OpKind k) { return k == OpKind::kGroupNormAct ? 3 : 5; }
};
static_assert(offsetof(FusedCustomOp, base) == 0, "OrtCustomOp must be the first member");

// ---- shape checks: at session creation on the graph's static shapes, at run on the inputs' shapes ----
struct Shape {
  bool known = false;         // rank known
  std::vector<int64_t> dims;  // a dim < 0 is dynamic (-1 or symbolic): checks that need it are left to the run
  int64_t numel() const {     // -1 unless every dim is static
    if (!known) return -1;
    int64_t n = 1;
    for (int64_t d : dims) {
      if (d < 0) return -1;
      n *= d;
    }
    return n;
  }
};

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return t + (s.size() == 1 ? ",)" : ")");
}

// X / W ranks, X's K against W, B / gamma / beta / extras having C elements, C % num_groups. *c_out: C, or -1 when
// it is not static.
OrtStatus* check_shapes(const Kernel& k, const std::vector<Shape>& in, int64_t* c_out) {
  const bool gemm = k.cfg.kind == OpKind::kGemmGroupNormAct;
  const Shape& X = in[0];
  int64_t C = -1;
  if (!gemm) {
    if (X.known && X.dims.size() < 2)
      return k.error("X must have rank >= 2 (N, C, *spatial), got shape " + shape_text(X.dims));
    if (X.known) C = X.dims[1];
  } else {
    const Shape& W = in[1];
    if (X.known && X.dims.size() < 2)
      return k.error("X must have rank >= 2 (rows, K), got shape " + shape_text(X.dims));
    if (W.known && W.dims.size() != 2) return k.error("W must be 2-D, got shape " + shape_text(W.dims));
    if (W.known) {
      const int64_t K = X.known ? X.dims.back() : -1;
      const int64_t wk = k.trans_b ? W.dims[1] : W.dims[0];
      C = k.trans_b ? W.dims[0] : W.dims[1];
      if (K >= 0 && wk >= 0 && wk != K)
        return k.error("X has K=" + std::to_string(K) + " features but W of shape " + shape_text(W.dims) +
                       " (trans_b=" + std::to_string(k.trans_b) + ") expects " + std::to_string(wk));
    }
  }
  *c_out = C < 0 ? -1 : C;
  if (C < 0) return nullptr;
  const size_t gi = gemm ? 3 : 1;  // index of gamma
  std::vector<std::pair<size_t, std::string>> per_channel;
  if (gemm) per_channel.emplace_back(2, "bias B");
  per_channel.emplace_back(gi, "gamma");
  per_channel.emplace_back(gi + 1, "beta");
  for (const auto& p : per_channel) {
    const int64_t n = in[p.first].numel();
    if (n >= 0 && n != C)
      return k.error(p.second + " has " + std::to_string(n) + " elements, expected C=" + std::to_string(C));
  }
  for (size_t e = 0; k.num_fixed_inputs + e < in.size(); ++e) {
    const int64_t n = in[k.num_fixed_inputs + e].numel();
    if (n >= 0 && n != C)
      return k.error("extra input " + std::to_string(e) + " has " + std::to_string(n) + " elements, expected C=" +
                     std::to_string(C) + " (one per channel)");
  }
  if (C > 0 && C % k.gn.num_groups != 0)
    return k.error("C=" + std::to_string(C) + " is not divisible by num_groups=" + std::to_string(k.gn.num_groups));
  return nullptr;
}

// Input i's shape as the graph knows it at session creation. ORT reports an unknown shape as rank 0, so rank 0
// counts as unknown here (a real scalar is caught at run).
Shape static_shape(const OrtApi* api, const OrtKernelInfo* info, size_t i) {
  Shape s;
  OrtTypeInfo* ti = nullptr;
  if (!ok(api, api->KernelInfo_GetInputTypeInfo(info, i, &ti)) || !ti) return s;
  const OrtTensorTypeAndShapeInfo* tsi = nullptr;  // owned by ti
  size_t rank = 0;
  if (ok(api, api->CastTypeInfoToTensorInfo(ti, &tsi)) && tsi && ok(api, api->GetDimensionsCount(tsi, &rank)) &&
      rank > 0) {
    s.dims.resize(rank);
    s.known = ok(api, api->GetDimensions(tsi, s.dims.data(), rank));
  }
  api->ReleaseTypeInfo(ti);
  if (!s.known) s.dims.clear();
  return s;
}

OrtStatus* ORT_API_CALL create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info,
                                      void** out) {
  *out = nullptr;
  try {
    auto k = std::make_unique<Kernel>();
    k->api = api;
    k->cfg = FusedCustomOp::self(op)->cfg;
    k->node = node_name(api, info);
    k->num_fixed_inputs = FusedCustomOp::fixed_inputs(k->cfg.kind);
    char err[512] = {0};

    int64_t groups = 0;
    bool has_groups = false;
    FUSEDOPS_ORT_CHECK(attr_int(*k, info, "num_groups", &groups, &has_groups));
    if (!has_groups) return k->error("attribute 'num_groups' is required");
    if (groups <= 0 || groups > 2147483647)
      return k->error("num_groups must be positive, got " + std::to_string(groups));
    float eps = 1e-5f;
    FUSEDOPS_ORT_CHECK(attr_float(*k, info, "epsilon", &eps));
    if (!std::isfinite(eps) || eps < 0.f)
      return k->error("epsilon must be a finite non-negative number, got " + std::to_string(eps));
    std::string pre, post, reduce;
    FUSEDOPS_ORT_CHECK(attr_string(*k, info, "pre", &pre));
    FUSEDOPS_ORT_CHECK(attr_string(*k, info, "post", &post));
    FUSEDOPS_ORT_CHECK(attr_string(*k, info, "reduce", &reduce));
    fusedops_groupnorm_desc& d = k->gn;
    d.num_groups = static_cast<int32_t>(groups);
    d.epsilon = eps;
    if (fusedops_parse_chain(pre.c_str(), &d.pre, err, sizeof err))
      return k->error(std::string("attribute 'pre': ") + err);
    if (fusedops_parse_chain(post.c_str(), &d.post, err, sizeof err))
      return k->error(std::string("attribute 'post': ") + err);
    if (fusedops_parse_reduce(reduce.c_str(), &d.reduce, err, sizeof err))
      return k->error(std::string("attribute 'reduce': ") + err);
    d.x_dtype = to_fusedops_dtype(k->cfg.x_type);
    d.param_dtype = to_fusedops_dtype(k->cfg.param_type);
    for (const char* key : {"plugin_namespace", "plugin_version"}) {
      std::string v;
      bool has = false;
      const char* want = std::strcmp(key, "plugin_namespace") == 0 ? "fusedops" : "1";
      FUSEDOPS_ORT_CHECK(attr_string(*k, info, key, &v, &has));
      if (has && v != want)
        return k->error(std::string("attribute '") + key + "' must be '" + want + "', got '" + v + "'");
    }
    if (k->cfg.kind == OpKind::kGemmGroupNormAct) {
      int64_t tb = 1, tf = 1;
      FUSEDOPS_ORT_CHECK(attr_int(*k, info, "trans_b", &tb));
      FUSEDOPS_ORT_CHECK(attr_int(*k, info, "allow_tf32", &tf));
      if (tb != 0 && tb != 1) return k->error("trans_b must be 0 or 1, got " + std::to_string(tb));
      if (tf != 0 && tf != 1) return k->error("allow_tf32 must be 0 or 1, got " + std::to_string(tf));
      k->trans_b = static_cast<int32_t>(tb);
      k->allow_tf32 = k->cfg.allow_tf32_override >= 0 ? k->cfg.allow_tf32_override : static_cast<int32_t>(tf);
    }
    k->num_extras = fusedops_num_extras(&d.pre, &d.post);
    size_t n_inputs = 0;
    if (ok(api, api->KernelInfo_GetInputCount(info, &n_inputs))) {
      const size_t have = n_inputs > k->num_fixed_inputs ? n_inputs - k->num_fixed_inputs : 0;
      if (have < static_cast<size_t>(k->num_extras))
        return k->error("chains reference " + std::to_string(k->num_extras) + " extra input(s), node has " +
                        std::to_string(have));
      if (have > FUSEDOPS_MAX_EXTRAS)
        return k->error("node has " + std::to_string(have) + " extra inputs; at most " +
                        std::to_string(FUSEDOPS_MAX_EXTRAS) + " are supported");
      if (n_inputs >= k->num_fixed_inputs) {
        std::vector<Shape> shapes(n_inputs);
        for (size_t i = 0; i < n_inputs; ++i) shapes[i] = static_shape(api, info, i);
        int64_t C = -1;
        FUSEDOPS_ORT_CHECK(check_shapes(*k, shapes, &C));
      }
    }
    *out = k.release();
    return nullptr;
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_FAIL, (std::string("fusedops: kernel creation failed: ") + e.what()).c_str());
  }
}

// ---- run-time helpers ----
struct TensorView {
  const void* data = nullptr;
  std::vector<int64_t> shape;
};

OrtStatus* read_input(const OrtApi* api, OrtKernelContext* ctx, size_t i, TensorView* tv) {
  const OrtValue* v = nullptr;
  FUSEDOPS_ORT_CHECK(api->KernelContext_GetInput(ctx, i, &v));
  if (!v) return api->CreateStatus(ORT_INVALID_ARGUMENT, "fusedops: missing input");
  OrtTensorTypeAndShapeInfo* info = nullptr;
  FUSEDOPS_ORT_CHECK(api->GetTensorTypeAndShape(v, &info));
  size_t rank = 0;
  OrtStatus* st = api->GetDimensionsCount(info, &rank);
  if (!st) {
    tv->shape.resize(rank);
    st = api->GetDimensions(info, tv->shape.data(), rank);
  }
  api->ReleaseTensorTypeAndShapeInfo(info);
  if (st) return st;
  void* p = nullptr;
  FUSEDOPS_ORT_CHECK(api->GetTensorMutableData(const_cast<OrtValue*>(v), &p));
  tv->data = p;
  return nullptr;
}

#ifdef FUSEDOPS_ORT_WITH_CUDA
// Workspace from KernelContext_GetScratchBuffer (API 18), which allocates on the kernel's compute stream: the CUDA
// EP's stream-aware arena then keeps the chunk from other streams until they have synchronised with this one, so
// returning it right after the enqueue is safe even when concurrent Run()s of one session use different streams.
// (A plain AllocatorAlloc chunk carries no stream and could be handed to another stream while our kernel still
// runs.) The API leaves the free to the caller, through the allocator the buffer came from. It dereferences the
// compute stream, so without one (ORT then runs the kernels without streams) the plain allocator is used.
struct DeviceScratch {
  const OrtApi* api = nullptr;
  OrtAllocator* alloc = nullptr;
  OrtMemoryInfo* mem = nullptr;
  void* ptr = nullptr;
  ~DeviceScratch() {
    if (ptr) {
      if (OrtStatus* st = api->AllocatorFree(alloc, ptr)) api->ReleaseStatus(st);
    }
    if (alloc) api->ReleaseAllocator(alloc);
    if (mem) api->ReleaseMemoryInfo(mem);
  }
  OrtStatus* get(const Kernel& k, OrtKernelContext* ctx, const OrtValue* like, size_t bytes, const void* stream) {
    api = k.api;
    if (bytes == 0) return nullptr;
    const OrtMemoryInfo* in_mem = nullptr;
    FUSEDOPS_ORT_CHECK(api->GetTensorMemoryInfo(like, &in_mem));
    int device = 0;
    FUSEDOPS_ORT_CHECK(api->MemoryInfoGetId(in_mem, &device));
    FUSEDOPS_ORT_CHECK(api->CreateMemoryInfo("Cuda", OrtDeviceAllocator, device, OrtMemTypeDefault, &mem));
    FUSEDOPS_ORT_CHECK(api->KernelContext_GetAllocator(ctx, mem, &alloc));  // first: needed for the free
    FUSEDOPS_ORT_CHECK(stream ? api->KernelContext_GetScratchBuffer(ctx, mem, bytes, &ptr)
                              : api->AllocatorAlloc(alloc, bytes, &ptr));
    if (!ptr) return k.error("could not allocate " + std::to_string(bytes) + " bytes of CUDA scratch");
    return nullptr;
  }
};
#endif

// ORT's intra-op thread pool as the core's scheduler (KernelContext_ParallelFor, API 17): the CPU kernels then
// honour intra_op_num_threads and share ORT's workers instead of competing with them. On failure the tasks run
// on the calling thread.
struct OrtScheduler {
  const OrtApi* api;
  OrtKernelContext* ctx;
  fusedops::cpu::Scheduler sched{&OrtScheduler::run, this, 0};

  struct Batch {
    void (*task)(void*, int64_t);
    void* task_ctx;
  };
  static void ORT_API_CALL call(void* user, size_t i) {
    const Batch* b = static_cast<const Batch*>(user);
    b->task(b->task_ctx, static_cast<int64_t>(i));
  }
  static void run(void* self, int64_t n, void (*task)(void*, int64_t), void* task_ctx) {
    OrtScheduler* s = static_cast<OrtScheduler*>(self);
    Batch b{task, task_ctx};
    if (OrtStatus* st = s->api->KernelContext_ParallelFor(s->ctx, &OrtScheduler::call, static_cast<size_t>(n), 0, &b)) {
      s->api->ReleaseStatus(st);
      for (int64_t t = 0; t < n; ++t) task(task_ctx, t);
    }
  }
};

OrtStatus* compute_impl(Kernel& k, OrtKernelContext* ctx) {
  const OrtApi* api = k.api;
  size_t n_in = 0;
  FUSEDOPS_ORT_CHECK(api->KernelContext_GetInputCount(ctx, &n_in));
  const bool gemm = k.cfg.kind == OpKind::kGemmGroupNormAct;
  std::vector<TensorView> in(n_in);
  for (size_t i = 0; i < n_in; ++i) FUSEDOPS_ORT_CHECK(read_input(api, ctx, i, &in[i]));
  const size_t n_extras = n_in - k.num_fixed_inputs;
  if (n_extras < static_cast<size_t>(k.num_extras))
    return k.error("chains reference " + std::to_string(k.num_extras) + " extra input(s), got " +
                   std::to_string(n_extras));
  if (n_extras > FUSEDOPS_MAX_EXTRAS) return k.error("too many extra inputs");

  std::vector<Shape> shapes(n_in);
  for (size_t i = 0; i < n_in; ++i) shapes[i] = Shape{true, in[i].shape};
  int64_t C = 0;
  FUSEDOPS_ORT_CHECK(check_shapes(k, shapes, &C));
  const TensorView& X = in[0];
  fusedops_groupnorm_desc d = k.gn;
  fusedops_gemm_desc gd{};
  std::vector<int64_t> out_shape;
  d.C = C;
  d.S = 1;
  if (!gemm) {
    d.N = X.shape[0];
    for (size_t i = 2; i < X.shape.size(); ++i) d.S *= X.shape[i];
    out_shape = X.shape;
    if (d.reduce != FUSEDOPS_REDUCE_NONE) out_shape[1] = 1;
  } else {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < X.shape.size(); ++i) rows *= X.shape[i];
    d.N = rows;
    gd.K = X.shape.back();
    gd.trans_b = k.trans_b;
    gd.allow_tf32 = k.allow_tf32;
    out_shape.assign(X.shape.begin(), X.shape.end() - 1);
    out_shape.push_back(d.reduce != FUSEDOPS_REDUCE_NONE ? 1 : C);
  }
  const void* extras[FUSEDOPS_MAX_EXTRAS] = {};
  for (size_t e = 0; e < n_extras; ++e) extras[e] = in[k.num_fixed_inputs + e].data;

  OrtValue* y = nullptr;
  FUSEDOPS_ORT_CHECK(api->KernelContext_GetOutput(ctx, 0, out_shape.data(), out_shape.size(), &y));
  void* yp = nullptr;
  FUSEDOPS_ORT_CHECK(api->GetTensorMutableData(y, &yp));
  // Empty batch / spatial extent: nothing to compute (the output is empty too).
  if (d.N == 0 || d.S == 0) return nullptr;

  char err[512] = {0};
  int rc = 0;
  if (gemm) {
    gd.gn = d;
    if (!k.cfg.cuda) {
      OrtScheduler os{api, ctx};
      fusedops::cpu::ScopedScheduler use_ort_threads(&os.sched);
      rc = fusedops_gemm_groupnorm_act_cpu(&gd, X.data, in[1].data, in[2].data, in[3].data, in[4].data, extras,
                                           static_cast<int32_t>(n_extras), yp, err, sizeof err);
      g_cpu_calls.fetch_add(1, std::memory_order_relaxed);
    } else {
#ifdef FUSEDOPS_ORT_WITH_CUDA
      rc = fusedops_gemm_groupnorm_act_check(&gd, err, sizeof err);
      if (rc == 0) {
        void* stream = nullptr;
        FUSEDOPS_ORT_CHECK(api->KernelContext_GetGPUComputeStream(ctx, &stream));
        const OrtValue* xv = nullptr;
        FUSEDOPS_ORT_CHECK(api->KernelContext_GetInput(ctx, 0, &xv));
        DeviceScratch ws;
        const size_t bytes = fusedops_gemm_groupnorm_act_workspace_size(&gd);
        FUSEDOPS_ORT_CHECK(ws.get(k, ctx, xv, bytes, stream));
        rc = fusedops_gemm_groupnorm_act_cuda(&gd, X.data, in[1].data, in[2].data, in[3].data, in[4].data, extras,
                                              static_cast<int32_t>(n_extras), yp, ws.ptr, bytes,
                                              static_cast<fusedops_stream_t>(stream), err, sizeof err);
        g_cuda_calls.fetch_add(1, std::memory_order_relaxed);
      }
#else
      return k.error("library built without CUDA");
#endif
    }
  } else {
    if (!k.cfg.cuda) {
      OrtScheduler os{api, ctx};
      fusedops::cpu::ScopedScheduler use_ort_threads(&os.sched);
      rc = fusedops_groupnorm_act_cpu(&d, X.data, in[1].data, in[2].data, extras, static_cast<int32_t>(n_extras), yp,
                                      err, sizeof err);
      g_cpu_calls.fetch_add(1, std::memory_order_relaxed);
    } else {
#ifdef FUSEDOPS_ORT_WITH_CUDA
      rc = fusedops_groupnorm_act_check(&d, err, sizeof err);
      if (rc == 0) {
        void* stream = nullptr;
        FUSEDOPS_ORT_CHECK(api->KernelContext_GetGPUComputeStream(ctx, &stream));
        const OrtValue* xv = nullptr;
        FUSEDOPS_ORT_CHECK(api->KernelContext_GetInput(ctx, 0, &xv));
        DeviceScratch ws;
        const size_t bytes = fusedops_groupnorm_act_workspace_size(&d);
        FUSEDOPS_ORT_CHECK(ws.get(k, ctx, xv, bytes, stream));
        rc = fusedops_groupnorm_act_cuda(&d, X.data, in[1].data, in[2].data, extras, static_cast<int32_t>(n_extras),
                                         yp, ws.ptr, bytes, static_cast<fusedops_stream_t>(stream), err, sizeof err);
        g_cuda_calls.fetch_add(1, std::memory_order_relaxed);
      }
#else
      return k.error("library built without CUDA");
#endif
    }
  }
  if (rc != 0) {
    const OrtErrorCode code = rc == FUSEDOPS_ERR_INVALID_ARGUMENT ? ORT_INVALID_ARGUMENT
                              : rc == FUSEDOPS_ERR_UNSUPPORTED    ? ORT_NOT_IMPLEMENTED
                                                                  : ORT_FAIL;
    return api->CreateStatus(code, (k.where() + err).c_str());
  }
  return nullptr;
}

OrtStatus* ORT_API_CALL compute(void* kernel, OrtKernelContext* ctx) {
  Kernel& k = *static_cast<Kernel*>(kernel);
  try {
    return compute_impl(k, ctx);
  } catch (const std::exception& e) {
    return k.api->CreateStatus(ORT_FAIL, (k.where() + "unexpected failure: " + e.what()).c_str());
  } catch (...) {
    return k.api->CreateStatus(ORT_FAIL, (k.where() + "unexpected failure").c_str());
  }
}

// Everything one RegisterCustomOps call creates; kept until the library is unloaded (ORT holds raw pointers to the
// domain and ops for as long as sessions made from those options live).
struct Registration {
  std::vector<std::unique_ptr<FusedCustomOp>> ops;
  OrtCustomOpDomain* domain = nullptr;
  const OrtApi* api = nullptr;
  ~Registration() {
    if (domain && api) api->ReleaseCustomOpDomain(domain);
  }
};
std::mutex g_reg_mu;
std::vector<std::unique_ptr<Registration>>& registrations() {
  static std::vector<std::unique_ptr<Registration>> r;
  return r;
}

// Session config fusedops.allow_tf32 ("0"/"1"), read when the library is registered on the options.
int read_allow_tf32(const OrtApi* api, const OrtSessionOptions* so, std::string* bad) {
  int has = 0;
  OrtStatus* st = api->HasSessionConfigEntry(so, kConfigAllowTf32, &has);
  if (st) {
    api->ReleaseStatus(st);
    return -1;
  }
  if (!has) return -1;
  char buf[64] = {0};
  size_t size = sizeof buf;
  st = api->GetSessionConfigEntry(so, kConfigAllowTf32, buf, &size);
  if (st) {
    api->ReleaseStatus(st);
    return -1;
  }
  const std::string v(buf);
  if (v == "0") return 0;
  if (v == "1") return 1;
  *bad = v;
  return -2;
}

}  // namespace

extern "C" {

FUSEDOPS_ORT_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* base) {
  if (!base) return nullptr;
  const OrtApi* api = base->GetApi(kOrtApiVersion);
  if (!api) {
    // ORT older than 1.21: fail loudly (version 1 of the API is always there and has CreateStatus), rather than
    // register nothing and let the nodes fall back to their function bodies unnoticed.
    const OrtApi* api1 = base->GetApi(1);
    const std::string msg = std::string("fusedops: libfusedops_ort needs ONNX Runtime 1.21 or newer (C API 21); "
                                        "this is ") + (base->GetVersionString ? base->GetVersionString() : "older");
    return api1 ? api1->CreateStatus(ORT_FAIL, msg.c_str()) : nullptr;
  }
  try {
    std::string bad;
    const int tf32 = read_allow_tf32(api, options, &bad);
    if (tf32 == -2)
      return api->CreateStatus(ORT_INVALID_ARGUMENT,
                               ("fusedops: session config fusedops.allow_tf32 must be '0' or '1', got '" + bad + "'")
                                   .c_str());
    auto reg = std::make_unique<Registration>();
    reg->api = api;
    const ONNXTensorElementDataType F = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
                                    H = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
                                    B = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
    const std::pair<ONNXTensorElementDataType, ONNXTensorElementDataType> combos[] = {
        {F, F}, {H, H}, {B, B}, {H, F}, {B, F}};
    std::vector<bool> eps = {false};
#ifdef FUSEDOPS_ORT_WITH_CUDA
    eps.push_back(true);
#endif
    for (bool cuda : eps)
      for (OpKind kind : {OpKind::kGroupNormAct, OpKind::kGemmGroupNormAct})
        for (const auto& c : combos)
          reg->ops.push_back(std::make_unique<FusedCustomOp>(OpConfig{kind, c.first, c.second, cuda, tf32}));
    if (OrtStatus* st = api->CreateCustomOpDomain(kDomain, &reg->domain)) return st;
    for (auto& op : reg->ops)
      if (OrtStatus* st = api->CustomOpDomain_Add(reg->domain, &op->base)) return st;
    if (OrtStatus* st = api->AddCustomOpDomain(options, reg->domain)) return st;
    std::lock_guard<std::mutex> lk(g_reg_mu);
    registrations().push_back(std::move(reg));
    return nullptr;
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_FAIL, (std::string("fusedops: RegisterCustomOps failed: ") + e.what()).c_str());
  }
}

// Debug counters: how many times the custom kernels ran (proves ORT used the library, not the function body).
FUSEDOPS_ORT_EXPORT int64_t fusedops_ort_kernel_calls(void) { return g_cpu_calls.load() + g_cuda_calls.load(); }
FUSEDOPS_ORT_EXPORT int64_t fusedops_ort_cpu_kernel_calls(void) { return g_cpu_calls.load(); }
FUSEDOPS_ORT_EXPORT int64_t fusedops_ort_cuda_kernel_calls(void) { return g_cuda_calls.load(); }
FUSEDOPS_ORT_EXPORT int fusedops_ort_has_cuda(void) {
#ifdef FUSEDOPS_ORT_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
