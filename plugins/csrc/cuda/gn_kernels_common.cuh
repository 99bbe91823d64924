// What the GroupNorm kernels share (gn_kernels.cuh lists them): launch constants, the parameter block, the pre
// transform, vector helpers, chunk statistics and the normalising store. Device code; included via gn_kernels.cuh.
#pragma once

#include <stdint.h>

#include "cuda/dev/gelu_erff.cuh"
#include "cuda/device_common.cuh"
#include "cuda/gn_plan.h"

namespace fusedops {
namespace cuda {
namespace {

constexpr int kBlock = 256;        // threads of the split kernels
constexpr int kUnroll = 4;         // vectors in flight per thread
constexpr int64_t kTargetBlocks = 1024;  // enough blocks to fill any current GPU several times over
constexpr size_t kRowSmemMax = 96 * 1024;  // fits the opt-in limit of sm_80, sm_89 and sm_90 alike
constexpr size_t kAlign = 256;

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t elem_size(int32_t dt) { return dt == FUSEDOPS_F32 ? 4 : 2; }

struct GnParams {
  const void* x;
  void* y;
  const void* gamma;
  const void* beta;
  const void* bias;
  ExtraPtrs ex;
  int32_t param_dtype;
  int32_t reduce;
  fusedops_chain pre;
  fusedops_chain post;
  int64_t N, C, S, Cg, L, chunk;
  int32_t G, P;
  int64_t group_offset;  // first (sample, group) of this launch (SPLIT runs in L2-sized waves of groups)
  float eps;
  FastDiv div_sv;  // group-relative vector index -> channel offset (divides by S / VEC)
  FastDiv div_cg;  // channel -> group (divides by C / G)
  Welford* partials;  // [N*G][P]
  float2* stats;      // [N*G] (mean, rstd), reduce path
  unsigned* arrived;  // one-pass: [N*G] chunks of each group whose partial is published, then the ticket counter
};

// ---------------------------------------------------------------------------------------------------------------
// S > 1: one (sample, group) per blockIdx.x, chunk blockIdx.y of it.
enum GroupMode { MODE_STATS = 0, MODE_APPLY = 1, MODE_FUSED = 2 };
// How the pre chain is applied: interpreted (any chain), none, or GELU inlined (model 4's ConvTranspose->GELU->GN,
// where the chain runs twice per element and its cost decides whether the kernel stays memory-bound).
// PRE_GELU_FAST is the same GELU through gelu_fast (one polynomial + ex2; see device_common.cuh), the default;
// the plan option gelu_erff selects PRE_GELU (erff, dev/gelu_erff.cuh) for A/B measurements.
enum PreKind { PRE_CHAIN = 0, PRE_NONE = 1, PRE_GELU = 2, PRE_GELU_FAST = 3 };

template <int VEC, int PRE>
__device__ __forceinline__ void pre_transform(const GnParams& p, float (&v)[VEC], int64_t c) {
  if (p.bias) {
    const float b = load_param(p.bias, p.param_dtype, c);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] += b;
  }
  if (PRE == PRE_GELU) {
    dev::pre_gelu_erff<VEC>(v);  // A/B alternative (plan option gelu_erff), dev/gelu_erff.cuh
  } else if (PRE == PRE_GELU_FAST) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = gelu_fast(v[j]);
  } else if (PRE == PRE_CHAIN) {
    apply_chain<VEC, false>(&p.pre, v, c, &p.ex, p.param_dtype);
  }
}

template <int VEC>
__device__ __forceinline__ void smem_store(float* p, const float (&v)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4)
      *reinterpret_cast<float4*>(p + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
  } else if constexpr (VEC == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  } else {
    p[0] = v[0];
  }
}
template <int VEC>
__device__ __forceinline__ void smem_load(const float* p, float (&v)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4) {
      const float4 q = *reinterpret_cast<const float4*>(p + j);
      v[j] = q.x, v[j + 1] = q.y, v[j + 2] = q.z, v[j + 3] = q.w;
    }
  } else if constexpr (VEC == 2) {
    const float2 q = *reinterpret_cast<const float2*>(p);
    v[0] = q.x, v[1] = q.y;
  } else {
    v[0] = p[0];
  }
}

// fn(iv, v) for every vector iv in [vstart, vend) of this thread (stride blockDim.x), v loaded from x + iv * VEC;
// kUnroll loads are issued before the first use.
template <typename T, int VEC, typename Fn>
__device__ __forceinline__ void for_each_loaded_vector(const T* x, int64_t vstart, int64_t vend, Fn&& fn) {
  for (int64_t it = vstart + threadIdx.x; it < vend; it += int64_t(blockDim.x) * kUnroll) {
    float v[kUnroll][VEC];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = it + int64_t(u) * blockDim.x;
      if (iv < vend) load_vec<T, VEC>(x + iv * VEC, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = it + int64_t(u) * blockDim.x;
      if (iv < vend) fn(iv, v[u]);
    }
  }
}

// Per-thread moments of pre(x) over the vectors [vstart, vend) of one group; with a cache, pre(x) is also kept in
// shared memory at (iv - vstart) * VEC, by the thread that later reads it back.
template <typename T, int VEC, int PRE>
__device__ __forceinline__ Welford chunk_moments(const GnParams& p, const T* x, int64_t c0, int64_t vstart,
                                                 int64_t vend, float* cache) {
  Welford w{0.f, 0.f, 0.f};
  for_each_loaded_vector<T, VEC>(x, vstart, vend, [&](int64_t iv, float (&v)[VEC]) {
    pre_transform<VEC, PRE>(p, v, c0 + p.div_sv.div(uint32_t(iv)));
    welford_add_vec<VEC>(w, v);
    if (cache) smem_store<VEC>(cache + (iv - vstart) * VEC, v);
  });
  return w;
}

// The group's (mean, rstd) from its P chunk partials, combined in a fixed order (deterministic). Read through L2:
// in the one-pass kernel other SMs wrote them during this launch, and a stale L1 line must not be used.
__device__ __forceinline__ float2 group_mean_rstd(const GnParams& p, int64_t gi) {
  Welford w{0.f, 0.f, 0.f};
  for (int i = threadIdx.x; i < p.P; i += blockDim.x) {
    const Welford* src = p.partials + gi * p.P + i;
    w = welford_combine(w, Welford{__ldcg(&src->n), __ldcg(&src->mean), __ldcg(&src->m2)});
  }
  w = block_welford(w);
  return make_float2(w.mean, rsqrtf(w.m2 / w.n + p.eps));
}

// One vector of channel c: (x - mean) * (rstd * gamma) + beta (exact beta when x == mean, a one-element group,
// unlike x * scale + shift), then post, stored to y.
template <typename T, int VEC>
__device__ __forceinline__ void normalize_store(const GnParams& p, float (&v)[VEC], int64_t c, float2 stats, T* y) {
  const float scale = stats.y * load_param(p.gamma, p.param_dtype, c);
  const float b = load_param(p.beta, p.param_dtype, c);
#pragma unroll
  for (int j = 0; j < VEC; ++j) v[j] = (v[j] - stats.x) * scale + b;
  apply_chain<VEC, false>(&p.post, v, c, &p.ex, p.param_dtype);
  store_vec<T, VEC>(y, v);
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops
