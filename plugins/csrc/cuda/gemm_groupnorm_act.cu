// GemmGroupNormAct on CUDA: D = X · Wᵀ (+ bias) by cuBLASLt, then ONE epilogue kernel that reads D once: bias (when
// cuBLASLt did not add it), pre, GroupNorm per row, post, and the optional channel reduction (which writes only
// (M, 1)). Without a reduction D is Y itself and the epilogue runs in place (every epilogue kernel reads each element
// before the thread that owns it writes it, and no block reads another block's elements), so no (M, C) intermediate
// exists beside the output; with a reduction D lives in the workspace.
//
// Process-wide state (allowed by the ABI): per device, a lazily created cuBLASLt handle; per (device, shape, dtype,
// mode, alignment) the algorithm cuBLASLt's heuristic chose. Both live behind one mutex and are never freed.
#include <cublasLt.h>

#include <stdlib.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/groupnorm_kernels.cuh"

namespace fusedops {
namespace cuda {
namespace {

constexpr size_t kAlign = 256;

// cuBLASLt's workspace cap: 4 MiB by default (the reference GEMMs, 1024 x 8192 x 8192, need no split-K workspace, and
// 32 MiB per call would be the op's largest allocation); FUSEDOPS_LT_WORKSPACE_MB=<n> overrides it for measurements.
size_t lt_workspace_bytes() {
  if (const char* env = getenv("FUSEDOPS_LT_WORKSPACE_MB")) {
    const long mb = atol(env);
    if (mb >= 0 && mb <= 1024) return size_t(mb) << 20;
  }
  return size_t(4) << 20;
}
bool d_in_output(const fusedops_gemm_desc& g) { return g.gn.reduce == FUSEDOPS_REDUCE_NONE; }

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
size_t elem_size(int32_t dt) { return dt == FUSEDOPS_F32 ? 4 : 2; }

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

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume about the pointer.
uint32_t pointer_alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a) a >>= 1;
  return a;
}

using AlgoKey = std::tuple<int, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t, int32_t, uint32_t, uint32_t,
                           uint32_t, uint32_t, size_t>;
struct AlgoEntry {
  bool found;
  cublasLtMatmulAlgo_t algo;
};

struct LtState {
  std::mutex mu;
  std::vector<cublasLtHandle_t> handles;  // index = device
  std::map<AlgoKey, AlgoEntry> algos;
};
LtState& lt_state() {
  static LtState* s = new LtState();  // never destroyed: handles may outlive static destruction order
  return *s;
}

cublasStatus_t get_handle(int device, cublasLtHandle_t* out) {
  LtState& st = lt_state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.handles.size() <= size_t(device)) st.handles.resize(size_t(device) + 1, nullptr);
  if (!st.handles[device]) {
    cublasStatus_t s = cublasLtCreate(&st.handles[device]);
    if (s != CUBLAS_STATUS_SUCCESS) {
      st.handles[device] = nullptr;
      return s;
    }
  }
  *out = st.handles[device];
  return CUBLAS_STATUS_SUCCESS;
}

// RAII holders for the per-call cuBLASLt descriptors (cheap host objects; per call so that threads never share them).
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

#define FUSEDOPS_LT(call)                              \
  do {                                                 \
    cublasStatus_t s_ = (call);                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                 \
      *what = #call;                                   \
      return s_;                                       \
    }                                                  \
  } while (0)

// Row-major D (M, C) = X (M, K) · op(W) is column-major Dᵀ (C, M) = op(W)ᵀ-as-stored · Xᵀ: A = W, B = X.
cublasStatus_t make_descs(const fusedops_gemm_desc& g, bool bias_epilogue, const void* bias, LtDescs& ds,
                          const char** what) {
  const int64_t M = g.gn.N, C = g.gn.C, K = g.K;
  const cudaDataType_t ab = cuda_type(g.gn.x_dtype);
  const cublasComputeType_t compute = (g.gn.x_dtype == FUSEDOPS_F32 && g.allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                     : CUBLAS_COMPUTE_32F;
  FUSEDOPS_LT(cublasLtMatmulDescCreate(&ds.op, compute, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (bias_epilogue) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const cudaDataType_t bt = cuda_type(g.gn.param_dtype);
    FUSEDOPS_LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  if (g.trans_b) {
    FUSEDOPS_LT(cublasLtMatrixLayoutCreate(&ds.a, ab, uint64_t(K), uint64_t(C), K));  // W (C, K) row-major
  } else {
    FUSEDOPS_LT(cublasLtMatrixLayoutCreate(&ds.a, ab, uint64_t(C), uint64_t(K), C));  // W (K, C) row-major
  }
  FUSEDOPS_LT(cublasLtMatrixLayoutCreate(&ds.b, ab, uint64_t(K), uint64_t(M), K));
  FUSEDOPS_LT(cublasLtMatrixLayoutCreate(&ds.d, ab, uint64_t(C), uint64_t(M), C));
  return CUBLAS_STATUS_SUCCESS;
}

// Finds (or recalls) the algorithm for this problem. Returns SUCCESS with found=false when the heuristic has none.
cublasStatus_t choose_algo(cublasLtHandle_t h, int device, const fusedops_gemm_desc& g, bool bias_epilogue,
                           const void* x, const void* w, const void* bias, const void* dbuf, size_t lt_ws,
                           LtDescs& ds, AlgoEntry* out, const char** what) {
  const uint32_t al_a = pointer_alignment(w), al_b = pointer_alignment(x), al_d = pointer_alignment(dbuf);
  const uint32_t al_bias = bias_epilogue ? pointer_alignment(bias) : 256;
  const AlgoKey key{device, g.gn.N, g.gn.C, g.K, g.gn.x_dtype, g.gn.param_dtype, g.trans_b * 2 + g.allow_tf32,
                    int32_t(bias_epilogue), al_a, al_b, al_d, al_bias, lt_ws};
  LtState& st = lt_state();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.algos.find(key);
    if (it != st.algos.end()) {
      *out = it->second;
      return CUBLAS_STATUS_SUCCESS;
    }
  }
  FUSEDOPS_LT(cublasLtMatmulPreferenceCreate(&ds.pref));
  FUSEDOPS_LT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt_ws,
                                                   sizeof(lt_ws)));
  FUSEDOPS_LT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                   sizeof(al_a)));
  FUSEDOPS_LT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                   sizeof(al_b)));
  FUSEDOPS_LT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                   sizeof(al_d)));
  FUSEDOPS_LT(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                   sizeof(al_d)));
  cublasLtMatmulHeuristicResult_t res{};
  int count = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &res, &count);
  AlgoEntry e{};
  e.found = (s == CUBLAS_STATUS_SUCCESS && count > 0 && res.state == CUBLAS_STATUS_SUCCESS);
  if (e.found) e.algo = res.algo;
  if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) {
    *what = "cublasLtMatmulAlgoGetHeuristic";
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.algos[key] = e;
  }
  *out = e;
  return CUBLAS_STATUS_SUCCESS;
}

struct WorkspaceLayout {
  size_t lt_bytes, lt_offset, d_offset, gn_offset, total;
};
WorkspaceLayout layout_workspace(const fusedops_gemm_desc& g) {
  WorkspaceLayout l;
  l.lt_bytes = lt_workspace_bytes();
  l.lt_offset = 0;
  l.d_offset = align_up(l.lt_bytes, kAlign);
  const size_t d_bytes = d_in_output(g) ? 0 : size_t(g.gn.N) * size_t(g.gn.C) * elem_size(g.gn.x_dtype);
  l.gn_offset = l.d_offset + align_up(d_bytes, kAlign);
  l.total = kAlign /* caller pointer alignment slack */ + l.gn_offset + plan_groupnorm(g.gn).workspace;
  return l;
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops

using fusedops::cuda::set_error;

extern "C" {

FUSEDOPS_API size_t fusedops_gemm_groupnorm_act_workspace_size(const fusedops_gemm_desc* d) {
  if (!d || fusedops_gemm_groupnorm_act_check(d, nullptr, 0) != FUSEDOPS_OK) return 0;
  return fusedops::cuda::layout_workspace(*d).total;
}

FUSEDOPS_API int fusedops_gemm_groupnorm_act_cuda(const fusedops_gemm_desc* d, const void* x, const void* w,
                                                  const void* bias, const void* gamma, const void* beta,
                                                  const void* const* extras, int32_t num_extras, void* y,
                                                  void* workspace, size_t workspace_size, fusedops_stream_t stream,
                                                  char* err, size_t err_len) {
  using namespace fusedops::cuda;
  if (!d) return set_error(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "GemmGroupNormAct: descriptor is NULL");
  int rc = fusedops_gemm_groupnorm_act_check(d, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  if (!x || !w || !gamma || !beta || !y)
    return set_error(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "GemmGroupNormAct: %s pointer is NULL",
                     !x ? "X" : !w ? "W" : !gamma ? "gamma" : !beta ? "beta" : "Y");
  const int32_t need = fusedops_num_extras(&d->gn.pre, &d->gn.post);
  if (num_extras < need || num_extras > FUSEDOPS_MAX_EXTRAS)
    return set_error(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                     "GemmGroupNormAct: chains reference %d extra input(s), got %d", need, num_extras);
  for (int k = 0; k < need; ++k)
    if (!extras || !extras[k])
      return set_error(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "GemmGroupNormAct: extra input %d is NULL", k);
  if (d->gn.C > (int64_t(1) << 31) || d->gn.N > (int64_t(1) << 31) - 1)
    return set_error(err, err_len, FUSEDOPS_ERR_UNSUPPORTED, "GemmGroupNormAct: M=%lld x C=%lld is too large",
                     (long long)d->gn.N, (long long)d->gn.C);
  rc = check_cuda_limits(d->gn, "GemmGroupNormAct", err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  const WorkspaceLayout wl = layout_workspace(*d);
  if (!workspace || workspace_size < wl.total)
    return set_error(err, err_len, FUSEDOPS_ERR_WORKSPACE, "GemmGroupNormAct: workspace of %zu bytes, need %zu",
                     workspace ? workspace_size : size_t(0), wl.total);
  char* ws = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(workspace), kAlign));
  void* lt_ws = ws + wl.lt_offset;
  void* dbuf = d_in_output(*d) ? y : ws + wl.d_offset;
  void* gn_ws = ws + wl.gn_offset;
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);

  int device = 0;
  cudaError_t ce = cudaGetDevice(&device);
  if (ce != cudaSuccess)
    return set_error(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: cudaGetDevice: %s", cudaGetErrorString(ce));
  cublasLtHandle_t h = nullptr;
  cublasStatus_t ls = get_handle(device, &h);
  if (ls != CUBLAS_STATUS_SUCCESS)
    return set_error(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: cublasLtCreate: %s",
                     status_name(ls));

  // Bias in the GEMM epilogue when cuBLASLt offers it for these types; otherwise in our epilogue kernel.
  bool bias_in_gemm = bias != nullptr;
  AlgoEntry algo{};
  const char* what = "";
  LtDescs descs_fused, descs_plain;
  LtDescs* ds = &descs_fused;
  if (bias_in_gemm) {
    ls = make_descs(*d, true, bias, descs_fused, &what);
    if (ls == CUBLAS_STATUS_SUCCESS)
      ls = choose_algo(h, device, *d, true, x, w, bias, dbuf, wl.lt_bytes, descs_fused, &algo, &what);
    if (ls != CUBLAS_STATUS_SUCCESS || !algo.found) bias_in_gemm = false;
  }
  if (!bias_in_gemm) {
    ds = &descs_plain;
    ls = make_descs(*d, false, nullptr, descs_plain, &what);
    if (ls == CUBLAS_STATUS_SUCCESS)
      ls = choose_algo(h, device, *d, false, x, w, nullptr, dbuf, wl.lt_bytes, descs_plain, &algo, &what);
    if (ls != CUBLAS_STATUS_SUCCESS)
      return set_error(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: %s: %s", what, status_name(ls));
    if (!algo.found)
      return set_error(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "GemmGroupNormAct: cuBLASLt has no algorithm for M=%lld C=%lld K=%lld dtype %d",
                       (long long)d->gn.N, (long long)d->gn.C, (long long)d->K, d->gn.x_dtype);
  }
  const float alpha = 1.f, beta0 = 0.f;
  ls = cublasLtMatmul(h, ds->op, &alpha, w, ds->a, x, ds->b, &beta0, dbuf, ds->d, dbuf, ds->d, &algo.algo, lt_ws,
                      wl.lt_bytes, s);
  if (ls != CUBLAS_STATUS_SUCCESS)
    return set_error(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: cublasLtMatmul: %s",
                     status_name(ls));

  GnLaunch a{&d->gn, dbuf, bias_in_gemm ? nullptr : bias, gamma, beta, extras, num_extras, y, gn_ws,
             plan_groupnorm(d->gn).workspace, s};
  ce = launch_groupnorm(a);
  if (ce != cudaSuccess)
    return set_error(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: epilogue launch failed: %s",
                     cudaGetErrorString(ce));
  return FUSEDOPS_OK;
}

}  // extern "C"
