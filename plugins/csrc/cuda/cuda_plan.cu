// The CUDA side of plans. GroupNormAct: the GroupNorm launch plan (gn_plan.cu). GemmGroupNormAct: D = X · Wᵀ (+ bias)
// by cuBLASLt, then ONE epilogue that reads D once: bias (when cuBLASLt did not add it), pre, GroupNorm per row, post,
// and the optional channel reduction (which writes only (M, 1)). Without a reduction D is Y itself and the epilogue
// runs in place (every epilogue kernel reads each element before the thread that owns it writes it, and no block
// reads another block's elements), so no (M, C) intermediate exists beside the output; with a reduction D lives in
// the workspace.
//
// Made once per plan: the cuBLASLt matrix layouts, the matmul descriptor and the algorithm cuBLASLt's heuristic
// chose (for 16-byte aligned pointers; the rare misaligned call gets a second algorithm, found once), the epilogue's
// launch plan and the workspace layout. A run does no query, no allocation and no attribute change, except that
// GemmGroupNormAct captures and instantiates a CUDA graph of its launches the second time it sees a pointer set, then
// replays it (cuda/replay_cache.h: one cudaGraphLaunch instead of cuBLASLt's per-call host work).
#include <cublasLt.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/message.h"
#include "cuda/convt_gn.h"
#include "cuda/cutlass/fused_gemm_plan.h"
#include "cuda/gn_plan.h"
#include "cuda/replay_cache.h"
#include "cuda/skinny_gemm.h"
#include "plan_backend.h"

namespace fusedops {

namespace {

using core::set_message;

constexpr size_t kAlign = 256;
constexpr size_t kDefaultLtWorkspace = size_t(4) << 20;  // 32 MiB measured no faster at the reference shapes
constexpr uint32_t kPlannedAlignment = 16;                // bytes every pointer of the planned GEMM must be aligned to

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
size_t elem_size(int32_t dt) { return dt == FUSEDOPS_F32 ? 4 : 2; }
bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// cublasGetStatusString lives in libcublas, which we do not link; the names suffice.
const char* status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
  }
}

cudaDataType_t cuda_type(int32_t dt) {
  return dt == FUSEDOPS_F16 ? CUDA_R_16F : dt == FUSEDOPS_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Per device, a lazily created cuBLASLt handle (cuBLASLt documents handles as safe to share between threads and
// streams); never destroyed: plans and handles may outlive static destruction order.
cublasStatus_t lt_handle(int device, cublasLtHandle_t* out) {
  static std::mutex* mu = new std::mutex();
  static std::vector<cublasLtHandle_t>* handles = new std::vector<cublasLtHandle_t>();
  std::lock_guard<std::mutex> lock(*mu);
  if (handles->size() <= size_t(device)) handles->resize(size_t(device) + 1, nullptr);
  if (!(*handles)[device]) {
    const cublasStatus_t s = cublasLtCreate(&(*handles)[device]);
    if (s != CUBLAS_STATUS_SUCCESS) {
      (*handles)[device] = nullptr;
      return s;
    }
  }
  *out = (*handles)[device];
  return CUBLAS_STATUS_SUCCESS;
}

#define FUSEDOPS_LT(call)      \
  do {                         \
    cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) { \
      *what = #call;           \
      return s_;               \
    }                          \
  } while (0)

// The matmul descriptor: transposes and, with a bias epilogue, the bias type and pointer. Initialised in storage the
// caller owns (a plan's, or a run's stack when the bias pointer is per call), so no run allocates.
cublasStatus_t init_matmul_desc(cublasLtMatmulDescOpaque_t* storage, const fusedops_gemm_desc& g, bool bias_epilogue,
                                const void* bias, const char** what) {
  const cublasComputeType_t compute = (g.gn.x_dtype == FUSEDOPS_F32 && g.allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                     : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t op = storage;
  FUSEDOPS_LT(cublasLtMatmulDescInit(op, compute, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (bias_epilogue) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const cudaDataType_t bt = cuda_type(g.gn.param_dtype);
    FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  return CUBLAS_STATUS_SUCCESS;
}

struct Algo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct CudaPlan {
  int device = 0;
  fusedops_op_desc desc{};
  bool gemm = false;
  cuda::GnLaunchPlanPtr gn;
  // GemmGroupNormAct
  bool zero_k = false;       // K = 0: D is zero, the epilogue adds the bias
  bool d_in_output = false;  // no reduction: the epilogue normalises Y in place
  size_t lt_bytes = 0, d_offset = 0, gn_offset = 0, d_bytes = 0;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatrixLayoutOpaque_t a{}, b{}, d{};
  cublasLtMatmulDescOpaque_t plain{};  // no epilogue
  bool bias_epilogue = false;          // `algo` expects the bias epilogue (descriptor made per run: the pointer)
  Algo algo;                           // for kPlannedAlignment-aligned pointers
  // Misaligned pointers or an absent bias: no bias epilogue, the elements' own alignment. Found on first need.
  mutable std::once_flag fallback_once;
  mutable Algo fallback;
  mutable cublasStatus_t fallback_status = CUBLAS_STATUS_SUCCESS;
  // The CUTLASS kernel with GroupNorm in its epilogue, when the planner picks it (cuda/cutlass/gemm_choice.cpp);
  // calls whose pointers it cannot take run the cuBLASLt path above.
  cuda::cutlass_gemm::FusedGemmPlanPtr fused;
  // M <= 16: the skinny kernel (cuda/skinny_gemm.cu) instead of cuBLASLt, for calls with 16-byte aligned X and W.
  bool skinny = false;
  // ConvTransposeGroupNormAct (cuda/convt_gn.cu)
  cuda::ConvtLaunchPtr convt;
  // GemmGroupNormAct's launches (GEMM + epilogue) replayed as CUDA graphs per pointer set (cuda/replay_cache.h);
  // internal state behind its own mutex, like fallback_once: the plan stays shareable between threads.
  bool replay = false;
  mutable cuda::ReplayCache replay_cache;
};
void CudaPlanDeleter::operator()(CudaPlan* p) const { delete p; }

namespace {

// Row-major D (M, C) = X (M, K) · op(W) is column-major Dᵀ (C, M) = op(W)ᵀ-as-stored · Xᵀ: A = W, B = X.
cublasStatus_t init_layouts(CudaPlan& p, const char** what) {
  const fusedops_gemm_desc& g = p.desc.d;
  const int64_t M = g.gn.N, C = g.gn.C, K = g.K;
  const cudaDataType_t ab = cuda_type(g.gn.x_dtype);
  if (g.trans_b) {
    FUSEDOPS_LT(cublasLtMatrixLayoutInit(&p.a, ab, uint64_t(K), uint64_t(C), K));  // W (C, K) row-major
  } else {
    FUSEDOPS_LT(cublasLtMatrixLayoutInit(&p.a, ab, uint64_t(C), uint64_t(K), C));  // W (K, C) row-major
  }
  FUSEDOPS_LT(cublasLtMatrixLayoutInit(&p.b, ab, uint64_t(K), uint64_t(M), K));
  FUSEDOPS_LT(cublasLtMatrixLayoutInit(&p.d, ab, uint64_t(C), uint64_t(M), C));
  return CUBLAS_STATUS_SUCCESS;
}

// cuBLASLt's heuristic for the plan's shapes with pointers aligned to `alignment` bytes.
cublasStatus_t find_algo(const CudaPlan& p, cublasLtMatmulDesc_t op, uint32_t alignment, Algo* out,
                         const char** what) {
  cublasLtMatmulPreferenceOpaque_t pref_storage;
  cublasLtMatmulPreference_t pref = &pref_storage;
  FUSEDOPS_LT(cublasLtMatmulPreferenceInit(pref));
  const size_t lt_ws = p.lt_bytes;
  FUSEDOPS_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt_ws,
                                                   sizeof(lt_ws)));
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    FUSEDOPS_LT(cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment)));
  cublasLtMatmulHeuristicResult_t res{};
  int count = 0;
  auto* a = const_cast<cublasLtMatrixLayoutOpaque_t*>(&p.a);
  auto* b = const_cast<cublasLtMatrixLayoutOpaque_t*>(&p.b);
  auto* d = const_cast<cublasLtMatrixLayoutOpaque_t*>(&p.d);
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(p.handle, op, a, b, d, d, pref, 1, &res, &count);
  if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) {
    *what = "cublasLtMatmulAlgoGetHeuristic";
    return s;
  }
  out->found = s == CUBLAS_STATUS_SUCCESS && count > 0 && res.state == CUBLAS_STATUS_SUCCESS;
  if (out->found) out->algo = res.algo;
  return CUBLAS_STATUS_SUCCESS;
}

// Plans the GEMM: layouts, the plain descriptor, and the algorithm (with the bias fused into cuBLASLt's epilogue
// where it offers one for these types).
int plan_gemm(CudaPlan& p, char* err, size_t err_len) {
  const char* what = "";
  cublasStatus_t s = lt_handle(p.device, &p.handle);
  if (s != CUBLAS_STATUS_SUCCESS)
    return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: cublasLtCreate: %s", status_name(s));
  s = init_layouts(p, &what);
  if (s == CUBLAS_STATUS_SUCCESS) s = init_matmul_desc(&p.plain, p.desc.d, false, nullptr, &what);
  if (s != CUBLAS_STATUS_SUCCESS)
    return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: %s: %s", what, status_name(s));
  // The heuristic reads the bias pointer's presence, not its value: any aligned address stands in for the calls'.
  cublasLtMatmulDescOpaque_t with_bias;
  const void* stand_in = reinterpret_cast<const void*>(uintptr_t(kAlign));
  if (init_matmul_desc(&with_bias, p.desc.d, true, stand_in, &what) == CUBLAS_STATUS_SUCCESS &&
      find_algo(p, &with_bias, kPlannedAlignment, &p.algo, &what) == CUBLAS_STATUS_SUCCESS && p.algo.found) {
    p.bias_epilogue = true;
    return FUSEDOPS_OK;
  }
  s = find_algo(p, &p.plain, kPlannedAlignment, &p.algo, &what);
  if (s != CUBLAS_STATUS_SUCCESS)
    return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: %s: %s", what, status_name(s));
  if (!p.algo.found)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "GemmGroupNormAct: cuBLASLt has no algorithm for M=%lld C=%lld K=%lld dtype %d",
                       (long long)p.desc.d.gn.N, (long long)p.desc.d.gn.C, (long long)p.desc.d.K, p.desc.d.gn.x_dtype);
  return FUSEDOPS_OK;
}

struct WorkspaceLayout {
  size_t lt_bytes, d_offset, d_bytes, gn_offset, total;
};
WorkspaceLayout layout_workspace(const fusedops_op_desc& d, size_t lt_bytes) {
  WorkspaceLayout l{};
  const fusedops_groupnorm_desc& gn = d.d.gn;
  const size_t gn_bytes = cuda::plan_groupnorm(gn).workspace;
  if (d.op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT) {
    l.total = gn_bytes;
    return l;
  }
  l.lt_bytes = d.d.K > 0 ? lt_bytes : 0;
  l.d_offset = align_up(l.lt_bytes, kAlign);
  l.d_bytes = gn.reduce == FUSEDOPS_REDUCE_NONE ? 0 : size_t(gn.N) * size_t(gn.C) * elem_size(gn.x_dtype);
  l.gn_offset = l.d_offset + align_up(l.d_bytes, kAlign);
  l.total = kAlign /* caller pointer alignment slack */ + l.gn_offset + gn_bytes;
  return l;
}

// Restores the caller's current device when planning is done.
struct DeviceScope {
  int previous = -1;
  cudaError_t status = cudaSuccess;
  explicit DeviceScope(int device) {
    status = cudaGetDevice(&previous);
    if (status == cudaSuccess && previous != device) status = cudaSetDevice(device);
  }
  ~DeviceScope() {
    int now = -1;
    if (previous >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous) cudaSetDevice(previous);
  }
};

}  // namespace

int cuda_plan_create(const fusedops_op_desc& d, int32_t device, const fusedops_plan_options& o, CudaPlanPtr* out,
                     size_t* workspace, std::string* kernels, char* err, size_t err_len) {
  const bool gemm = d.op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT;
  const char* op = gemm                                                ? "GemmGroupNormAct"
                   : d.op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT ? "ConvTransposeGroupNormAct"
                                                                       : "GroupNormAct";
  int rc = cuda::check_cuda_limits(d.d.gn, op, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  if (gemm && (d.d.gn.C > (int64_t(1) << 31) || d.d.gn.N > (int64_t(1) << 31) - 1))
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED, "%s: M=%lld x C=%lld is too large for cuBLASLt", op,
                       (long long)d.d.gn.N, (long long)d.d.gn.C);
  if (device == FUSEDOPS_DEVICE_CURRENT) {
    const cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess)
      return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "%s: no current CUDA device: %s", op, cudaGetErrorString(e));
  }
  DeviceScope scope(device);
  if (scope.status != cudaSuccess)
    return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "%s: cannot use CUDA device %d: %s", op, device,
                       cudaGetErrorString(scope.status));
  CudaPlanPtr p(new CudaPlan());
  p->device = device;
  p->desc = d;
  p->gemm = gemm;
  if (d.op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT) {
    rc = cuda::convt_plan(d, o, &p->convt, workspace, kernels, err, err_len);
    if (rc != FUSEDOPS_OK) return rc;
    *out = std::move(p);
    return FUSEDOPS_OK;
  }
  std::string gn_text;
  rc = cuda::make_gn_launch_plan(d.d.gn, o, &p->gn, &gn_text, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  const size_t lt_bytes = o.lt_workspace_mib > 0 ? size_t(o.lt_workspace_mib) << 20 : kDefaultLtWorkspace;
  const WorkspaceLayout wl = layout_workspace(d, lt_bytes);
  *workspace = wl.total;
  if (!gemm) {
    *kernels = gn_text;
    *out = std::move(p);
    return FUSEDOPS_OK;
  }
  p->lt_bytes = wl.lt_bytes;
  p->d_offset = wl.d_offset;
  p->d_bytes = wl.d_bytes;
  p->gn_offset = wl.gn_offset;
  p->d_in_output = d.d.gn.reduce == FUSEDOPS_REDUCE_NONE;
  p->zero_k = d.d.K == 0;
  if (p->zero_k) {
    *kernels = "memset(D = 0, K = 0) + " + gn_text;
  } else {
    rc = plan_gemm(*p, err, err_len);
    if (rc != FUSEDOPS_OK) return rc;
    const char* compute = d.d.gn.x_dtype != FUSEDOPS_F32 ? "" : d.d.allow_tf32 ? ",tf32" : ",fp32";
    *kernels = std::string("cublaslt(") + (p->bias_epilogue ? "bias epilogue" : "no epilogue") + compute + ") + " +
               gn_text;
  }
  int32_t chosen = FUSEDOPS_GEMM_CUBLASLT;
  rc = cuda::cutlass_gemm::plan_if_chosen(d, o, device, &p->fused, workspace, kernels, &chosen, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  p->replay = !o.direct_launches;
  if (chosen == FUSEDOPS_GEMM_SKINNY) {
    p->skinny = true;
    *kernels = "skinny_gemm(M=" + std::to_string(d.d.gn.N) + ") + " + gn_text + " [misaligned pointers: " + *kernels +
               "]";
  }
  *out = std::move(p);
  return FUSEDOPS_OK;
}

namespace {

// GemmGroupNormAct's GEMM (skinny kernel, memset for K = 0, or cuBLASLt) and its epilogue, launched on `s`; `g`
// holds the epilogue's per-channel pointers and Y.
int run_gemm_direct(const CudaPlan& p, const void* const* in, void* y, void* workspace, cudaStream_t s,
                    cuda::GnPointers g, char* err, size_t err_len) {
  const void* x = in[0];
  const void* w = in[1];
  const void* bias = in[2];
  char* ws = workspace ? reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(workspace), kAlign)) : nullptr;
  void* dbuf = p.d_in_output ? y : ws + p.d_offset;
  g.workspace = ws ? ws + p.gn_offset : nullptr;
  g.x = dbuf;
  g.bias = bias;  // added by the epilogue unless cuBLASLt's bias epilogue adds it
  if (p.skinny && aligned(x, kPlannedAlignment) && aligned(w, kPlannedAlignment)) {
    const fusedops_gemm_desc& gd = p.desc.d;
    const cudaError_t e = cuda::run_skinny_gemm(x, w, dbuf, gd.gn.N, gd.gn.C, gd.K, gd.gn.x_dtype, s);
    if (e != cudaSuccess)
      return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: skinny GEMM launch failed: %s",
                         cudaGetErrorString(e));
  } else if (p.zero_k) {
    const size_t bytes = size_t(p.desc.d.gn.N) * size_t(p.desc.d.gn.C) * elem_size(p.desc.d.gn.x_dtype);
    const cudaError_t e = cudaMemsetAsync(dbuf, 0, bytes, s);
    if (e != cudaSuccess)
      return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: cudaMemsetAsync: %s",
                         cudaGetErrorString(e));
  } else {
    const bool planned = aligned(x, kPlannedAlignment) && aligned(w, kPlannedAlignment) &&
                         aligned(dbuf, kPlannedAlignment) && (!p.bias_epilogue || (bias && aligned(bias, kPlannedAlignment)));
    const cublasLtMatmulAlgo_t* algo = &p.algo.algo;
    cublasLtMatmulDescOpaque_t run_desc;
    cublasLtMatmulDesc_t op = const_cast<cublasLtMatmulDescOpaque_t*>(&p.plain);
    const char* what = "cublasLtMatmul";
    if (planned && p.bias_epilogue) {
      cublasStatus_t ls = init_matmul_desc(&run_desc, p.desc.d, true, bias, &what);
      if (ls != CUBLAS_STATUS_SUCCESS)
        return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: %s: %s", what, status_name(ls));
      op = &run_desc;
      g.bias = nullptr;  // added by cuBLASLt
    } else if (!planned) {
      std::call_once(p.fallback_once, [&p] {
        const char* w_ = "";
        const uint32_t al = uint32_t(elem_size(p.desc.d.gn.x_dtype));
        p.fallback_status = find_algo(p, const_cast<cublasLtMatmulDescOpaque_t*>(&p.plain), al, &p.fallback, &w_);
      });
      if (p.fallback_status != CUBLAS_STATUS_SUCCESS || !p.fallback.found)
        return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                           "GemmGroupNormAct: cuBLASLt has no algorithm for these pointers' alignment (%s)",
                           status_name(p.fallback_status));
      algo = &p.fallback.algo;
    }
    const float alpha = 1.f, beta0 = 0.f;
    auto* la = const_cast<cublasLtMatrixLayoutOpaque_t*>(&p.a);
    auto* lb = const_cast<cublasLtMatrixLayoutOpaque_t*>(&p.b);
    auto* ld = const_cast<cublasLtMatrixLayoutOpaque_t*>(&p.d);
    const cublasStatus_t ls = cublasLtMatmul(p.handle, op, &alpha, w, la, x, lb, &beta0, dbuf, ld, dbuf, ld, algo,
                                             ws, p.lt_bytes, s);
    if (ls != CUBLAS_STATUS_SUCCESS)
      return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: cublasLtMatmul: %s", status_name(ls));
  }
  const cudaError_t e = cuda::run_gn(*p.gn, g, s);
  if (e != cudaSuccess)
    return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: epilogue launch failed: %s",
                       cudaGetErrorString(e));
  return FUSEDOPS_OK;
}

}  // namespace

size_t cuda_plan_prepared_weights_size(const CudaPlan& p) {
  return p.fused ? cuda::cutlass_gemm::fused_gemm_prepared_bytes(*p.fused) : 0;
}

int cuda_plan_prepare_weights(const CudaPlan& p, const void* w, void* prepared, fusedops_stream_t stream, char* err,
                              size_t err_len) {
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  // Captured, the split would run only at replay: a caller keeping the buffer as prepared would read stale bytes.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "GemmGroupNormAct: weights are not prepared while the stream is captured into a CUDA graph "
                       "(prepare them before capture)");
  const cudaError_t e = cuda::cutlass_gemm::prepare_fused_gemm_weights(*p.fused, w, prepared, s);
  if (e != cudaSuccess)
    return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: splitting the weights failed: %s",
                       cudaGetErrorString(e));
  return FUSEDOPS_OK;
}

int cuda_plan_run(const CudaPlan& p, const void* const* in, int32_t n, const void* prepared, void* y, void* workspace,
                  size_t, fusedops_stream_t stream, char* err, size_t err_len) {
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  if (p.convt) {
    const cudaError_t e = cuda::convt_run(*p.convt, in, n, y, workspace, s);
    if (e != cudaSuccess)
      return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "ConvTransposeGroupNormAct: kernel launch failed: %s",
                         cudaGetErrorString(e));
    return FUSEDOPS_OK;
  }
  const int32_t extras_at = p.gemm ? 5 : 3;
  cuda::GnPointers g{};
  g.gamma = in[extras_at - 2];
  g.beta = in[extras_at - 1];
  for (int32_t k = 0; k + extras_at < n && k < FUSEDOPS_MAX_EXTRAS; ++k) g.extras[k] = in[extras_at + k];
  g.y = y;
  if (!p.gemm) {
    g.x = in[0];
    g.workspace = workspace;
    const cudaError_t e = cuda::run_gn(*p.gn, g, s);
    if (e != cudaSuccess)
      return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GroupNormAct: kernel launch failed: %s",
                         cudaGetErrorString(e));
    return FUSEDOPS_OK;
  }
  if (p.fused && cuda::cutlass_gemm::fused_gemm_accepts(*p.fused, in[0], in[1], y)) {
    const cudaError_t e = cuda::cutlass_gemm::run_fused_gemm(*p.fused, in, n, prepared, y, workspace, s);
    if (e != cudaSuccess)
      return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: CUTLASS kernel launch failed: %s",
                         cudaGetErrorString(e));
    return FUSEDOPS_OK;
  }
  cuda::ReplayCache::Key key;
  if (p.replay && cuda::ReplayCache::make_key(in, n, y, workspace, &key)) {
    cudaError_t e = cudaSuccess;
    const auto launch = [&](cudaStream_t cs) {
      return run_gemm_direct(p, in, y, workspace, cs, g, nullptr, 0) == FUSEDOPS_OK ? cudaSuccess
                                                                                    : cudaErrorUnknown;
    };
    if (p.replay_cache.run(key, s, launch, &e)) {
      if (e != cudaSuccess)
        return set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: CUDA graph launch failed: %s",
                           cudaGetErrorString(e));
      return FUSEDOPS_OK;
    }
  }
  return run_gemm_direct(p, in, y, workspace, s, g, err, err_len);
}

size_t cuda_workspace_size(const fusedops_op_desc& d) {
  if (d.op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT) return cuda::convt_workspace_size(d);
  return std::max(layout_workspace(d, kDefaultLtWorkspace).total, gemm_choice::cutlass_workspace_bound(d));
}

}  // namespace fusedops
