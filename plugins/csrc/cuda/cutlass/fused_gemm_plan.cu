// A GemmGroupNormAct plan on the CUTLASS kernel: the chosen instantiation planned once (fused_kernel.cuh), the
// epilogue's shape-only parameters, with a channel reduction the finishing kernel that combines the per-tile partials
// of each row (one thread a row, tiles in a fixed order: deterministic), and for 3xTF32 the kernel on presplit
// weights with the kernel that splits W once.
#include <stdio.h>

#include <algorithm>

#include "core/message.h"
#include "cuda/cutlass/fused_gemm_plan.h"
#include "cuda/cutlass/fused_kernel.h"
#include "cuda/cutlass/tf32_split.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

namespace {

constexpr size_t kAlign = 256;
constexpr int kFinishThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kFinishThreads)
    reduce_finish_kernel(const RedState* __restrict__ partials, int tiles, int64_t M, int32_t op, int64_t C, T* y) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= M) return;
  RedState r = red_init(op);
  for (int t = 0; t < tiles; ++t) r = red_combine(op, r, partials[int64_t(t) * M + row]);
  y[row] = from_float<T>(red_finish(op, r, C));
}

// W's 3xTF32 split, once: hi (TF32-rounded) into hi[i], lo = W - hi into lo[i], the bits the mainloop's own split
// gives. Four values a thread (W's rows are 16-byte aligned: the plan's K is a multiple of 4, W 16-byte aligned).
constexpr int kSplitThreads = 256;
__global__ void __launch_bounds__(kSplitThreads)
    split_weights_kernel(const uint4* __restrict__ w, uint4* __restrict__ hi, uint4* __restrict__ lo, int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    uint4 x = w[i], l;
    tf32_split4(x, l);
    hi[i] = x;
    lo[i] = l;
  }
}

const char* reduce_name(int32_t op) {
  switch (op) {
    case FUSEDOPS_REDUCE_MIN: return "min";
    case FUSEDOPS_REDUCE_MAX: return "max";
    case FUSEDOPS_REDUCE_SUM: return "sum";
    case FUSEDOPS_REDUCE_MEAN: return "mean";
    default: return "logsumexp";
  }
}

const char* mode_text(gemm_choice::Mode m) {
  switch (m) {
    case gemm_choice::Mode::TF32: return "tf32";
    case gemm_choice::Mode::BF16: return "bf16";
    case gemm_choice::Mode::FP16: return "fp16";
    default: return "3xtf32";
  }
}

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }
char* align_up_ptr(void* p, size_t a) {
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + a - 1) / a * a);
}

}  // namespace

struct FusedGemmPlan {
  FusedKernelPtr kernel;
  FusedKernelPtr presplit;  // 3xTF32: the same GEMM on W's prepared form
  size_t w_values = 0;      // C K
  int sm_count = 0;         // the device's SMs: bounds the weight split's grid
  GnEpilogueParams epi{};  // shape-only part; pointers per run
  int tiles_n = 0;
  int32_t x_dtype = FUSEDOPS_F32;
  size_t pair_bytes = 8;  // Y alignment of a stored channel pair
  const void* finish = nullptr;
};
void FusedGemmPlanDeleter::operator()(FusedGemmPlan* p) const { delete p; }

int make_fused_gemm_plan(const fusedops_op_desc& d, const gemm_choice::Choice& choice, int device, int sm_count,
                         FusedGemmPlanPtr* out, size_t* workspace, std::string* text, char* err, size_t err_len) {
  const fusedops_groupnorm_desc& gn = d.d.gn;
  const FusedKernelFactory make = factory(choice.mode, choice.config);  // (nullptr outside the table)
  if (!make)
    return core::set_message(err, err_len, FUSEDOPS_ERR_NOT_BUILT,
                             "GemmGroupNormAct: CUTLASS %s configuration %d is not built", mode_text(choice.mode),
                             choice.config + 1);
  FusedGemmPlanPtr p(new FusedGemmPlan());
  GnEpilogueParams& e = p->epi;
  e.pre = gn.pre;
  e.post = gn.post;
  e.M = gn.N;
  e.C = gn.C;
  e.cg = int32_t(gn.C / gn.num_groups);
  e.reduce = gn.reduce;
  e.param_dtype = gn.param_dtype;
  e.eps = gn.epsilon;
  e.inv_cg = 1.f / float(e.cg);
  const GemmShape shape{int(gn.N), int(gn.C), int(d.d.K)};
  int rc = make(shape, e, device, sm_count, &p->kernel, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  const int twin = choice.mode == gemm_choice::Mode::THREE_TF32 ? gemm_choice::presplit_twin(choice.config) : -1;
  if (twin >= 0) {
    rc = presplit_factory(twin)(shape, e, device, sm_count, &p->presplit, err, err_len);
    if (rc != FUSEDOPS_OK) return rc;
    p->w_values = size_t(gn.C) * size_t(d.d.K);
    p->sm_count = sm_count;
  }
  const gemm_choice::TileConfig& t = gemm_choice::config_of(choice.mode, choice.config);
  p->tiles_n = int((gn.C + t.tile_n - 1) / t.tile_n);
  p->x_dtype = gn.x_dtype;
  p->pair_bytes = gn.x_dtype == FUSEDOPS_F32 ? 8 : 4;
  char buf[192];
  snprintf(buf, sizeof buf, "cutlass_gn_gemm(%s,%s,Cg=%d,%s)", mode_text(choice.mode), t.name, e.cg,
           takes_whole_groups(e.cg) ? "groups" : "quads");
  *text = buf;
  *workspace = 0;
  if (gn.reduce != FUSEDOPS_REDUCE_NONE) {
    switch (gn.x_dtype) {
      case FUSEDOPS_F16: p->finish = reinterpret_cast<const void*>(reduce_finish_kernel<__half>); break;
      case FUSEDOPS_BF16: p->finish = reinterpret_cast<const void*>(reduce_finish_kernel<__nv_bfloat16>); break;
      default: p->finish = reinterpret_cast<const void*>(reduce_finish_kernel<float>); break;
    }
    *workspace = kAlign + size_t(p->tiles_n) * size_t(gn.N) * sizeof(RedState);
    snprintf(buf, sizeof buf, " + reduce_finish(%s,tiles=%d)", reduce_name(gn.reduce), p->tiles_n);
    *text += buf;
  }
  if (p->presplit) {
    snprintf(buf, sizeof buf, " [prepared weights: %s]", gemm_choice::kThreeTf32PresplitConfigs[twin].name);
    *text += buf;
  }
  *out = std::move(p);
  return FUSEDOPS_OK;
}

bool fused_gemm_accepts(const FusedGemmPlan& p, const void* x, const void* w, const void* y) {
  return aligned(x, 16) && aligned(w, 16) && (p.finish || aligned(y, p.pair_bytes));
}

size_t fused_gemm_prepared_bytes(const FusedGemmPlan& p) { return p.presplit ? 2 * p.w_values * sizeof(float) : 0; }

cudaError_t prepare_fused_gemm_weights(const FusedGemmPlan& p, const void* w, void* prepared, cudaStream_t stream) {
  if (!p.presplit) return cudaErrorNotSupported;
  const int64_t n4 = int64_t(p.w_values / 4);  // K % 4 == 0 (TMA rows of 16 bytes)
  if (n4 == 0) return cudaSuccess;
  uint4* hi = static_cast<uint4*>(prepared);
  // Grid-stride: 16 blocks an SM keep every SM's memory pipes busy; more only queue.
  const int64_t cap = int64_t(std::max(p.sm_count, 1)) * 16;
  const unsigned blocks = unsigned(std::min<int64_t>((n4 + kSplitThreads - 1) / kSplitThreads, cap));
  split_weights_kernel<<<blocks, kSplitThreads, 0, stream>>>(static_cast<const uint4*>(w), hi, hi + n4, n4);
  return cudaGetLastError();
}

cudaError_t run_fused_gemm(const FusedGemmPlan& p, const void* const* in, int32_t n, const void* prepared, void* y,
                           void* workspace, cudaStream_t stream) {
  GnEpilogueParams e = p.epi;
  e.bias = in[2];
  e.gamma = in[3];
  e.beta = in[4];
  for (int32_t k = 0; k + 5 < n && k < FUSEDOPS_MAX_EXTRAS; ++k) e.ex.p[k] = in[5 + k];
  RedState* partials = nullptr;
  if (p.finish) {
    partials = reinterpret_cast<RedState*>(align_up_ptr(workspace, kAlign));
    e.partials = partials;
  } else {
    e.y = y;
  }
  cudaError_t err =
      prepared && p.presplit
          ? p.presplit->run(in[0], prepared, static_cast<const float*>(prepared) + p.w_values, e, stream)
          : p.kernel->run(in[0], in[1], nullptr, e, stream);
  if (err != cudaSuccess || !p.finish) return err;
  int tiles = p.tiles_n;
  int64_t M = e.M, C = e.C;
  int32_t op = e.reduce;
  void* args[] = {&partials, &tiles, &M, &op, &C, &y};
  const unsigned blocks = unsigned((M + kFinishThreads - 1) / kFinishThreads);
  return cudaLaunchKernel(p.finish, dim3(blocks), dim3(kFinishThreads), args, 0, stream);
}

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
