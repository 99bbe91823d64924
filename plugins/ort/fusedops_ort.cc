// ONNX Runtime custom-op library for the fusedops domain: GroupNormAct, GemmGroupNormAct and ConvTransposeGroupNormAct
// on the CPU EP (the core's CPU kernels) and, in CUDA builds, the CUDA EP (the C ABI's CUDA entries on ORT's compute
// stream).
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
// ConvTransposeGroupNormAct's B is optional (an empty input name), as in its spec and ONNX function.
// The extras extra_0.. are one homogeneous variadic input (min arity 0): a node has exactly the extras its chains
// reference, as the catalog's ONNX function has, and no dummy optional slots.
//
// Sources: ort_kernel.h (shared types), node_info.cc (attributes as ORT gives them and as the library takes them,
// static shapes), this file (the ops, kernel creation, run, registration).
#include <atomic>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cpu_util.h"  // the core's scheduler hook (internal C++, linked statically)
#include "fusedops/fusedops.h"
#include "onnxruntime_c_api.h"
#include "ort_kernel.h"

#if defined(_WIN32)
#define FUSEDOPS_ORT_EXPORT __declspec(dllexport)
#else
#define FUSEDOPS_ORT_EXPORT __attribute__((visibility("default")))
#endif


namespace fusedops_ort {
namespace {

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
      return input_type(c, i);  // X (and W) | B, gamma, beta, extras
    };
    base.GetInputTypeCount = [](const OrtCustomOp* o) { return fixed_inputs(self(o)->cfg.kind) + 1; };
    base.GetOutputType = [](const OrtCustomOp* o, size_t) { return self(o)->cfg.x_type; };
    base.GetOutputTypeCount = [](const OrtCustomOp*) { return size_t{1}; };
    base.KernelCompute = nullptr;
    base.KernelDestroy = [](void* k) { delete static_cast<Kernel*>(k); };
    base.GetInputCharacteristic = [](const OrtCustomOp* o, size_t i) {
      const OpKind kind = self(o)->cfg.kind;
      if (i >= fixed_inputs(kind)) return INPUT_OUTPUT_VARIADIC;
      return input_optional(kind, i) ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
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
};
static_assert(offsetof(FusedCustomOp, base) == 0, "OrtCustomOp must be the first member");


OrtStatus* ORT_API_CALL create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info,
                                      void** out) {
  *out = nullptr;
  try {
    auto k = std::make_unique<Kernel>();
    k->api = api;
    k->cfg = FusedCustomOp::self(op)->cfg;
    k->node = node_name(api, info);
    k->num_fixed_inputs = fixed_inputs(k->cfg.kind);

    // Attributes: ORT's typed getters tell a wrong type from an absent attribute (absent keeps the default); the
    // library parses and validates the values.
    NodeAttributes na;
    FUSEDOPS_ORT_CHECK(read_attributes(*k, info, &na));
    fusedops_attributes fa{};
    fusedops_conv_attributes conv{};
    FUSEDOPS_ORT_CHECK(library_attributes(*k, na, &fa, &conv));
    char err[1024] = {0};
    int rc = fusedops_parse_attributes(&fa, &k->tmpl, err, sizeof err);
    if (rc != FUSEDOPS_OK) return k->library_error(rc, err);
    k->num_extras = fusedops_num_extras(&k->tmpl.d.gn.pre, &k->tmpl.d.gn.post);

    // What the graph already says about the inputs: a wrong model fails here, not at its first run.
    size_t n_inputs = 0;
    if (ok(api, api->KernelInfo_GetInputCount(info, &n_inputs))) {
      std::vector<fusedops_tensor_desc> in(n_inputs);
      for (size_t i = 0; i < n_inputs; ++i) in[i] = static_desc(*k, info, i);
      fusedops_op_desc d = k->tmpl;
      fusedops_tensor_desc y{};
      rc = fusedops_describe(&d, in.data(), static_cast<int32_t>(n_inputs), &y, err, sizeof err);
      if (rc != FUSEDOPS_OK) return k->library_error(rc, err);
    }
    // A constant W (an initializer) can be prepared once for the kernels that take it (ort_prepared_weights.h).
    int is_constant = 0;
    const OrtValue* w_value = nullptr;
    if (k->cfg.cuda && k->cfg.kind == OpKind::kGemmGroupNormAct &&
        ok(api, api->KernelInfoGetConstantInput_tensor(info, 1, &is_constant, &w_value)))
      k->w_constant = is_constant != 0;
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
  bool present = true;  // false: an absent optional input (data null)
};

OrtStatus* read_input(const Kernel& k, OrtKernelContext* ctx, size_t i, TensorView* tv) {
  const OrtApi* api = k.api;
  const OrtValue* v = nullptr;
  FUSEDOPS_ORT_CHECK(api->KernelContext_GetInput(ctx, i, &v));
  if (!v && input_optional(k.cfg.kind, i)) {
    tv->present = false;
    return nullptr;
  }
  if (!v) return k.error("input " + std::to_string(i) + " is missing");
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
// on the calling thread. `threads` sizes the kernels' work split (0: the hardware's count).
struct OrtScheduler {
  const OrtApi* api;
  OrtKernelContext* ctx;
  int threads;
  fusedops::cpu::Scheduler sched{&OrtScheduler::run, this, threads};

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
    g_parallel_for_calls.fetch_add(1, std::memory_order_relaxed);
    if (OrtStatus* st = s->api->KernelContext_ParallelFor(s->ctx, &OrtScheduler::call, static_cast<size_t>(n), 0, &b)) {
      s->api->ReleaseStatus(st);
      for (int64_t t = 0; t < n; ++t) task(task_ctx, t);
    }
  }
};

// The plan for this run's input shapes (and device): cached per kernel, made on first use.
OrtStatus* plan_for(Kernel& k, const std::vector<TensorView>& in, int32_t device, std::shared_ptr<PlanEntry>* out) {
  std::vector<int64_t> key;
  key.push_back(device);
  for (const TensorView& t : in) {
    key.push_back(t.present ? static_cast<int64_t>(t.shape.size()) : -1);
    key.insert(key.end(), t.shape.begin(), t.shape.end());
  }
  {
    std::lock_guard<std::mutex> lock(k.mu);
    auto it = k.plans.find(key);
    if (it != k.plans.end()) {
      *out = it->second;
      return nullptr;
    }
  }
  std::vector<fusedops_tensor_desc> descs(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].shape.size() > FUSEDOPS_MAX_RANK)
      return k.error("input " + std::to_string(i) + " has rank " + std::to_string(in[i].shape.size()) +
                     "; at most " + std::to_string(FUSEDOPS_MAX_RANK) + " is supported");
    descs[i].dtype = in[i].present ? to_fusedops_dtype(input_type(k.cfg, i)) : FUSEDOPS_DTYPE_UNKNOWN;
    descs[i].rank = in[i].present ? static_cast<int32_t>(in[i].shape.size()) : -1;
    for (size_t j = 0; j < in[i].shape.size(); ++j) descs[i].dims[j] = in[i].shape[j];
  }
  fusedops_op_desc d = k.tmpl;
  fusedops_tensor_desc y{};
  char err[1024] = {0};
  int rc = fusedops_describe(&d, descs.data(), static_cast<int32_t>(descs.size()), &y, err, sizeof err);
  if (rc != FUSEDOPS_OK) return k.library_error(rc, err);
  auto e = std::make_shared<PlanEntry>();
  rc = fusedops_plan_create(&d, device, nullptr, &e->plan, err, sizeof err);
  if (rc != FUSEDOPS_OK) return k.library_error(rc, err);
  e->out_shape.assign(y.dims, y.dims + y.rank);
  e->workspace = fusedops_plan_workspace_size(e->plan);
  e->prepared_weights = fusedops_plan_prepared_weights_size(e->plan);
  std::lock_guard<std::mutex> lock(k.mu);
  if (k.plans.size() >= 256) k.plans.clear();  // a bound for endlessly varying shapes
  *out = k.plans.emplace(std::move(key), e).first->second;
  return nullptr;
}

OrtStatus* compute_impl(Kernel& k, OrtKernelContext* ctx) {
  const OrtApi* api = k.api;
  size_t n_in = 0;
  FUSEDOPS_ORT_CHECK(api->KernelContext_GetInputCount(ctx, &n_in));
  std::vector<TensorView> in(n_in);
  for (size_t i = 0; i < n_in; ++i) FUSEDOPS_ORT_CHECK(read_input(k, ctx, i, &in[i]));
  int32_t device = FUSEDOPS_DEVICE_CPU;
#ifdef FUSEDOPS_ORT_WITH_CUDA
  const OrtValue* xv = nullptr;
  if (k.cfg.cuda) {
    FUSEDOPS_ORT_CHECK(api->KernelContext_GetInput(ctx, 0, &xv));
    const OrtMemoryInfo* mem = nullptr;
    FUSEDOPS_ORT_CHECK(api->GetTensorMemoryInfo(xv, &mem));
    int id = 0;
    FUSEDOPS_ORT_CHECK(api->MemoryInfoGetId(mem, &id));
    device = id;
  }
#else
  if (k.cfg.cuda) return k.error("library built without CUDA");
#endif
  std::shared_ptr<PlanEntry> e;
  FUSEDOPS_ORT_CHECK(plan_for(k, in, device, &e));

  OrtValue* y = nullptr;
  FUSEDOPS_ORT_CHECK(api->KernelContext_GetOutput(ctx, 0, e->out_shape.data(), e->out_shape.size(), &y));
  void* yp = nullptr;
  FUSEDOPS_ORT_CHECK(api->GetTensorMutableData(y, &yp));
  const void* ptrs[5 + FUSEDOPS_MAX_EXTRAS] = {};
  for (size_t i = 0; i < n_in && i < 5 + FUSEDOPS_MAX_EXTRAS; ++i) ptrs[i] = in[i].data;

  char err[1024] = {0};
  int rc = 0;
  if (!k.cfg.cuda) {
    OrtScheduler os{api, ctx, k.cfg.threads};
    fusedops::cpu::ScopedScheduler use_ort_threads(&os.sched);
    rc = fusedops_plan_run(e->plan, ptrs, static_cast<int32_t>(n_in), yp, nullptr, 0, nullptr, err, sizeof err);
    g_cpu_calls.fetch_add(1, std::memory_order_relaxed);
  } else {
#ifdef FUSEDOPS_ORT_WITH_CUDA
    void* stream = nullptr;
    FUSEDOPS_ORT_CHECK(api->KernelContext_GetGPUComputeStream(ctx, &stream));
    DeviceScratch ws;
    FUSEDOPS_ORT_CHECK(ws.get(k, ctx, xv, e->workspace, stream));
    const void* prepared = nullptr;
    if (k.w_constant && e->prepared_weights > 0)
      FUSEDOPS_ORT_CHECK(k.prepared.get(api, ctx, xv, e->plan, e->prepared_weights, in[1].data, stream, &prepared));
    rc = fusedops_plan_run_prepared(e->plan, ptrs, static_cast<int32_t>(n_in), prepared, yp, ws.ptr, e->workspace,
                                    static_cast<fusedops_stream_t>(stream), err, sizeof err);
    if (prepared) g_prepared_runs.fetch_add(1, std::memory_order_relaxed);
    g_cuda_calls.fetch_add(1, std::memory_order_relaxed);
#endif
  }
  if (rc != FUSEDOPS_OK) return k.library_error(rc, err);
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

// A session config entry's value; false when absent (or unreadable).
bool read_config(const OrtApi* api, const OrtSessionOptions* so, const char* key, std::string* out) {
  int has = 0;
  OrtStatus* st = api->HasSessionConfigEntry(so, key, &has);
  if (st) {
    api->ReleaseStatus(st);
    return false;
  }
  if (!has) return false;
  size_t size = 0;  // first call: the size with the terminating NUL
  st = api->GetSessionConfigEntry(so, key, nullptr, &size);
  if (st) api->ReleaseStatus(st);
  std::vector<char> buf(size + 1, '\0');
  size = buf.size();
  st = api->GetSessionConfigEntry(so, key, buf.data(), &size);
  if (st) {
    api->ReleaseStatus(st);
    return false;
  }
  *out = buf.data();
  return true;
}

// Session config fusedops.allow_tf32 ("0"/"1"), read when the library is registered on the options.
int read_allow_tf32(const OrtApi* api, const OrtSessionOptions* so, std::string* bad) {
  std::string v;
  if (!read_config(api, so, kConfigAllowTf32, &v)) return -1;
  if (v == "0") return 0;
  if (v == "1") return 1;
  *bad = v;
  return -2;
}

// Session config fusedops.intra_op_num_threads (a count >= 0), read when the library is registered on the options;
// 0 when absent, -1 (value in *bad) when not a count.
int read_threads(const OrtApi* api, const OrtSessionOptions* so, std::string* bad) {
  std::string v;
  if (!read_config(api, so, kConfigIntraOpThreads, &v)) return 0;
  char* end = nullptr;
  const long n = v.empty() ? -1 : std::strtol(v.c_str(), &end, 10);
  if (n < 0 || n > 4096 || *end != '\0') {
    *bad = v;
    return -1;
  }
  return static_cast<int>(n);
}

}  // namespace
}  // namespace fusedops_ort

using namespace fusedops_ort;

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
    const int threads = read_threads(api, options, &bad);
    if (threads < 0)
      return api->CreateStatus(ORT_INVALID_ARGUMENT, ("fusedops: session config fusedops.intra_op_num_threads must be "
                                                      "a thread count (0-4096), got '" + bad + "'").c_str());
    // Session config fusedops.cpu_blas: the CPU GEMM's BLAS (a library path, or "eigen"), process-wide for this
    // library (fusedops_set_cpu_blas); fusedops.ort.session() sets it to the scipy-openblas32 wheel's library.
    std::string blas;
    if (read_config(api, options, kConfigCpuBlas, &blas)) {
      char err[512] = {0};
      if (fusedops_set_cpu_blas(blas.c_str(), err, sizeof err) != FUSEDOPS_OK)
        return api->CreateStatus(ORT_INVALID_ARGUMENT,
                                 (std::string("fusedops: session config fusedops.cpu_blas: ") + err).c_str());
    }
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
    // The ops the spec lists for this adapter (FUSEDOPS_ORT_OPS, generated from fusedops/spec/ops.toml).
#define FUSEDOPS_ORT_KIND(ENUM, NAME) kind_of(FUSEDOPS_OP_##ENUM),
    static constexpr OpKind kinds[] = {FUSEDOPS_ORT_OPS(FUSEDOPS_ORT_KIND)};
#undef FUSEDOPS_ORT_KIND
    for (bool cuda : eps)
      for (OpKind kind : kinds)
        for (const auto& c : combos)
          reg->ops.push_back(std::make_unique<FusedCustomOp>(OpConfig{kind, c.first, c.second, cuda, tf32, threads}));
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
FUSEDOPS_ORT_EXPORT int64_t fusedops_ort_prepared_weight_runs(void) { return g_prepared_runs.load(); }
// How many times the CPU kernels handed a batch of tasks to ORT's intra-op pool (none when they size their work for
// one thread: the observable that fusedops.intra_op_num_threads is honoured).
FUSEDOPS_ORT_EXPORT int64_t fusedops_ort_parallel_for_calls(void) { return g_parallel_for_calls.load(); }
// What the CPU GEMM of this library uses (its own copy of the core): fusedops_cpu_blas().
FUSEDOPS_ORT_EXPORT const char* fusedops_ort_cpu_blas(void) { return fusedops_cpu_blas(); }
FUSEDOPS_ORT_EXPORT int fusedops_ort_has_cuda(void) {
#ifdef FUSEDOPS_ORT_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
