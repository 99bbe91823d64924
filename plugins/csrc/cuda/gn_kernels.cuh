// The GroupNorm(+chains, +channel reduction) kernels: device code only, included by the one translation unit that
// plans and launches them (gn_plan.cu). Launch shapes and measurements: docs/kernels.md.
//
//  - gn_row_kernel      S == 1 (rank-2 input, the GEMM epilogue): one block per sample; the row lives in shared memory,
//                       so X is read once; group statistics are exact two-pass over shared memory.
//  - gn_row_reg_kernel  S == 1, small power-of-two groups: a row in registers, group statistics by lane shuffles.
//  - gn_row_tile_kernel S == 1, the same groups: a block keeps one column slice and walks several rows.
//  - gn_group_kernel    S > 1, one (sample, group) is L = C/G*S contiguous elements, split into P chunks:
//                       FUSED (P == 1): one block computes the statistics then applies (second read hits L1/L2);
//                       STATS + APPLY (P > 1): per-chunk (n, mean, M2) partials to the workspace, then an apply pass
//                       whose blocks combine their group's P partials with Chan's formula.
//                       X is read twice, Y written once.
//  - gn_onepass_kernel  the SPLIT case in one persistent launch that reads X once: each block takes the next chunk
//                       (an atomic ticket, so chunks start in group order), keeps pre(x) of it in shared memory,
//                       publishes its partial statistics, waits until all chunks of its group have, then normalises
//                       from shared memory. Planned only when the device keeps more resident blocks than a group has
//                       chunks (then the wait cannot deadlock: see the kernel).
//  - reduce over C with S > 1: STATS, gn_finalize_kernel ((mean, rstd) per group), gn_reduce_kernel (one thread per
//                       spatial position looping over channels; the normalised (N, C, S) tensor is never written).
#pragma once

#include <stdint.h>

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
// The plan option gelu_erff selects PRE_GELU (erff) for A/B measurements.
enum PreKind { PRE_CHAIN = 0, PRE_NONE = 1, PRE_GELU = 2, PRE_GELU_FAST = 3 };

template <int VEC, int PRE>
__device__ __forceinline__ void pre_transform(const GnParams& p, float (&v)[VEC], int64_t c) {
  if (p.bias) {
    const float b = load_param(p.bias, p.param_dtype, c);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] += b;
  }
  if (PRE == PRE_GELU) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = apply_step(FUSEDOPS_STEP_GELU, v[j], 0.f, 0.f, 0.f);
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

template <typename T, int VEC, int MODE, int PRE>
__global__ void __launch_bounds__(kBlock) gn_group_kernel(const __grid_constant__ GnParams p) {
  // The apply pass walks the blocks in reverse so that it starts on the chunks the stats pass read last (in L2).
  const bool reverse = MODE == MODE_APPLY;
  const int64_t gi = p.group_offset + (reverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x);  // n * G + g
  const int64_t chunk_idx = reverse ? gridDim.y - 1 - blockIdx.y : blockIdx.y;
  const int64_t g = gi % p.G;
  const int64_t c0 = g * p.Cg;
  const int64_t base = gi * p.L;
  const T* x = static_cast<const T*>(p.x) + base;
  const int64_t start = chunk_idx * p.chunk;
  const int64_t end = min(p.L, start + p.chunk);
  const int64_t vstart = start / VEC, vend = end / VEC;  // chunk and L are multiples of VEC on this path

  float2 stats;
  if (MODE == MODE_STATS || MODE == MODE_FUSED) {
    const Welford w = block_welford(chunk_moments<T, VEC, PRE>(p, x, c0, vstart, vend, nullptr));
    if (MODE == MODE_STATS) {
      if (threadIdx.x == 0) p.partials[gi * p.P + chunk_idx] = w;
      return;
    }
    stats = make_float2(w.mean, rsqrtf(w.m2 / w.n + p.eps));
  } else {
    stats = group_mean_rstd(p, gi);
  }

  T* y = static_cast<T*>(p.y) + base;
  for_each_loaded_vector<T, VEC>(x, vstart, vend, [&](int64_t iv, float (&v)[VEC]) {
    const int64_t c = c0 + p.div_sv.div(uint32_t(iv));
    pre_transform<VEC, PRE>(p, v, c);
    normalize_store<T, VEC>(p, v, c, stats, y + iv * VEC);
  });
}

// One pass over X for large groups (model 4: 1024 groups x 33 chunks of 16K elements). Deadlock freedom: a block takes
// a ticket only when it runs, tickets are taken in order, and a block waits only for the chunks of its own group. If
// every running block were waiting, the lowest waiting group would miss a chunk whose ticket nobody has taken; all
// waiting blocks then hold tickets between that group's first chunk and that missing one, i.e. fewer than P of
// them. So as long as more than P blocks can run at once (checked at launch with the occupancy calculator), some
// block always progresses.
constexpr int kOnepassMaxChunk = 16384;  // floats of shared memory a block (64 KiB: 3 blocks an SM on sm_90)

// One-pass workspace: per-group arrival counts and the ticket counter (zeroed before each launch), then partials.
size_t onepass_partials_offset(int64_t groups) { return align_up(size_t(groups + 1) * sizeof(unsigned), kAlign); }

template <typename T, int VEC, int PRE>
__global__ void __launch_bounds__(kBlock) gn_onepass_kernel(const __grid_constant__ GnParams p, uint32_t tickets) {
  extern __shared__ float4 cache_f4[];
  float* cache = reinterpret_cast<float*>(cache_f4);
  __shared__ uint32_t ticket;
  unsigned* const next_ticket = p.arrived + p.N * p.G;
  for (;;) {
    if (threadIdx.x == 0) ticket = atomicAdd(next_ticket, 1u);
    __syncthreads();
    const uint32_t t = ticket;
    if (t >= tickets) return;  // uniform
    const int64_t gi = t / uint32_t(p.P), chunk_idx = t % uint32_t(p.P);
    const int64_t c0 = (gi % p.G) * p.Cg, base = gi * p.L;
    const int64_t start = chunk_idx * p.chunk, end = min(p.L, start + p.chunk);
    const int64_t vstart = start / VEC, vend = end / VEC;
    const T* x = static_cast<const T*>(p.x) + base;

    const Welford w = block_welford(chunk_moments<T, VEC, PRE>(p, x, c0, vstart, vend, cache));
    if (threadIdx.x == 0) {
      p.partials[gi * p.P + chunk_idx] = w;
      __threadfence();  // the partial is visible device-wide before the count that announces it
      atomicAdd(p.arrived + gi, 1u);
      while (*reinterpret_cast<volatile unsigned*>(p.arrived + gi) < unsigned(p.P)) __nanosleep(64);
      __threadfence();
    }
    __syncthreads();
    const float2 stats = group_mean_rstd(p, gi);

    T* y = static_cast<T*>(p.y) + base;
    for (int64_t iv = vstart + threadIdx.x; iv < vend; iv += blockDim.x) {
      float v[VEC];
      smem_load<VEC>(cache + (iv - vstart) * VEC, v);
      normalize_store<T, VEC>(p, v, c0 + p.div_sv.div(uint32_t(iv)), stats, y + iv * VEC);
    }
    __syncthreads();  // the cache and the ticket are reused by the next chunk
  }
}

// (mean, rstd) of every (sample, group) from its P partials: one thread per group.
__global__ void gn_finalize_kernel(const __grid_constant__ GnParams p, int64_t num_groups) {
  const int64_t gi = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gi >= num_groups) return;
  Welford w{0.f, 0.f, 0.f};
  for (int i = 0; i < p.P; ++i) w = welford_combine(w, p.partials[gi * p.P + i]);
  p.stats[gi] = make_float2(w.mean, rsqrtf(w.m2 / w.n + p.eps));
}

// Channel reduction with S > 1: thread per (n, s), loop over channels (coalesced along s).
template <typename T>
__global__ void __launch_bounds__(kBlock) gn_reduce_kernel(const __grid_constant__ GnParams p) {
  const int64_t blocks_per_sample = (p.S + blockDim.x - 1) / blockDim.x;
  const int64_t n = blockIdx.x / blocks_per_sample;
  const int64_t s = (blockIdx.x % blocks_per_sample) * blockDim.x + threadIdx.x;
  if (s >= p.S) return;
  const T* x = static_cast<const T*>(p.x) + n * p.C * p.S + s;
  RedState r = red_init(p.reduce);
  for (int64_t g = 0; g < p.G; ++g) {
    const float2 st = p.stats[n * p.G + g];
    for (int64_t c = g * p.Cg; c < (g + 1) * p.Cg; ++c) {
      float v[1] = {to_float(x[c * p.S])};
      pre_transform<1, PRE_CHAIN>(p, v, c);
      v[0] = (v[0] - st.x) * (st.y * load_param(p.gamma, p.param_dtype, c)) + load_param(p.beta, p.param_dtype, c);
      apply_chain<1, false>(&p.post, v, c, &p.ex, p.param_dtype);
      r = red_combine(p.reduce, r, red_value(p.reduce, v[0]));
    }
  }
  static_cast<T*>(p.y)[n * p.S + s] = from_float<T>(red_finish(p.reduce, r, p.C));
}

// ---------------------------------------------------------------------------------------------------------------
// S == 1: one block per row of C channels, the row staged in shared memory.
template <int VEC>
__device__ __forceinline__ void load_params_vec(const void* ptr, int32_t dtype, int64_t c0, float (&out)[VEC]) {
  switch (dtype) {
    case FUSEDOPS_F16: load_vec<__half, VEC>(static_cast<const __half*>(ptr) + c0, out); break;
    case FUSEDOPS_BF16: load_vec<__nv_bfloat16, VEC>(static_cast<const __nv_bfloat16*>(ptr) + c0, out); break;
    default: load_vec<float, VEC>(static_cast<const float*>(ptr) + c0, out); break;
  }
}

template <typename T, int VEC>
__global__ void gn_row_kernel(const __grid_constant__ GnParams p) {
  extern __shared__ float4 smem_f4[];
  float* z = reinterpret_cast<float*>(smem_f4);                               // C floats: pre(x + bias)
  float2* gstat = reinterpret_cast<float2*>(z + ((p.C + 1) & ~int64_t(1)));  // G x (mean, rstd), 8-byte aligned
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + row * p.C;
  const int64_t nvec = p.C / VEC;

  // 1) load (kUnroll vectors in flight per thread), bias, pre -> shared memory
  for_each_loaded_vector<T, VEC>(x, 0, nvec, [&](int64_t iv, float (&v)[VEC]) {
    if (p.bias) {
      float b[VEC];
      load_params_vec<VEC>(p.bias, p.param_dtype, iv * VEC, b);
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] += b[j];
    }
    apply_chain<VEC, true>(&p.pre, v, iv * VEC, &p.ex, p.param_dtype);
#pragma unroll
    for (int j = 0; j < VEC; ++j) z[iv * VEC + j] = v[j];
  });
  __syncthreads();

  // 2) exact two-pass statistics per group: W lanes per group (W a power of two, about Cg/4 values per lane)
  {
    int W = 1;
    while (W < 32 && W * 8 <= p.Cg) W <<= 1;  // W * 4 <= Cg < W * 8, capped at 32
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int per_warp = 32 / W;
    const int sub = lane / W, sl = lane % W;
    for (int64_t gb = int64_t(warp) * per_warp; gb < p.G; gb += int64_t(nwarps) * per_warp) {
      const int64_t g = gb + sub;
      const bool active = g < p.G;
      const float* zg = z + g * p.Cg;
      float s = 0.f;
      if (active)
        for (int64_t j = sl; j < p.Cg; j += W) s += zg[j];
      for (int o = W >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      const float mean = s / float(p.Cg);
      float m2 = 0.f;
      if (active)
        for (int64_t j = sl; j < p.Cg; j += W) {
          const float d = zg[j] - mean;
          m2 += d * d;
        }
      for (int o = W >> 1; o > 0; o >>= 1) m2 += __shfl_xor_sync(0xffffffffu, m2, o);
      if (active && sl == 0) gstat[g] = make_float2(mean, rsqrtf(m2 / float(p.Cg) + p.eps));
    }
  }
  __syncthreads();

  // 3) normalise, affine, post; store the row or reduce it
  T* y = static_cast<T*>(p.y);
  RedState r = red_init(p.reduce);
  for (int64_t iv = threadIdx.x; iv < nvec; iv += blockDim.x) {
    const int64_t c0 = iv * VEC;
    float v[VEC], ga[VEC], be[VEC];
    load_params_vec<VEC>(p.gamma, p.param_dtype, c0, ga);
    load_params_vec<VEC>(p.beta, p.param_dtype, c0, be);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float2 st = gstat[p.div_cg.div(uint32_t(c0 + j))];
      v[j] = (z[c0 + j] - st.x) * (st.y * ga[j]) + be[j];
    }
    apply_chain<VEC, true>(&p.post, v, c0, &p.ex, p.param_dtype);
    if (p.reduce == FUSEDOPS_REDUCE_NONE) {
      store_vec<T, VEC>(y + row * p.C + c0, v);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) r = red_combine(p.reduce, r, red_value(p.reduce, v[j]));
    }
  }
  if (p.reduce != FUSEDOPS_REDUCE_NONE) {
    __shared__ RedState part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    r = warp_red(p.reduce, r);
    if (lane == 0) part[warp] = r;
    __syncthreads();
    if (warp == 0) {
      r = lane < int(blockDim.x >> 5) ? part[lane] : red_init(p.reduce);
      r = warp_red(p.reduce, r);
      if (lane == 0) y[row] = from_float<T>(red_finish(p.reduce, r, p.C));
    }
  }
}

// S == 1 with small power-of-two groups (the GEMM epilogue of the reference models: C/G = 16 or 32): one block per row,
// each thread holds kRegVecs vectors in registers, a group is LPG = Cg / VEC consecutive lanes, and its exact two-pass
// statistics are LPG-lane shuffles. No shared memory, no barrier except for the channel reduction; all loads of a
// thread are issued before any arithmetic.
constexpr int kRegVecs = 2;          // few registers a thread -> high occupancy hides the L2 latency of gamma/beta
constexpr int kRegMaxThreads = 1024;
constexpr int kRegSliceThreads = 256;  // without a reduction a row is cut into slices of 256 x kRegVecs vectors

template <int VEC> struct Vals { float v[VEC]; };

// One vector of the row: bias, pre, group statistics across the LPG lanes of its group, affine, post, then store or
// fold into the reduction. Out of line: the caller's unrolled loop then holds eight calls instead of eight copies.
template <typename T, int VEC>
__device__ __forceinline__ RedState row_reg_vector(const GnParams& p, Vals<VEC>& val, int64_t row, int64_t iv, bool in,
                                                   int lpg, RedState r) {
  float(&v)[VEC] = val.v;
  const int64_t c0 = iv * VEC;
  const float inv_cg = 1.f / float(p.Cg);
  if (in) {
    if (p.bias) {
      float b[VEC];
      load_params_vec<VEC>(p.bias, p.param_dtype, c0, b);
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] += b[j];
    }
    apply_chain_inline<VEC, true>(p.pre, v, c0, p.ex, p.param_dtype);
  }
  float sum = 0.f;
  if (in)
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum += v[j];
  for (int o = 1; o < lpg; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float mean = sum * inv_cg;
  float m2 = 0.f;
  if (in)
#pragma unroll
    for (int j = 0; j < VEC; ++j) m2 += (v[j] - mean) * (v[j] - mean);
  for (int o = 1; o < lpg; o <<= 1) m2 += __shfl_xor_sync(0xffffffffu, m2, o);
  const float rstd = rsqrtf(m2 * inv_cg + p.eps);
  if (in) {
    float ga[VEC], be[VEC];
    load_params_vec<VEC>(p.gamma, p.param_dtype, c0, ga);
    load_params_vec<VEC>(p.beta, p.param_dtype, c0, be);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = (v[j] - mean) * (rstd * ga[j]) + be[j];
    apply_chain_inline<VEC, true>(p.post, v, c0, p.ex, p.param_dtype);
    if (p.reduce == FUSEDOPS_REDUCE_NONE) {
      store_vec<T, VEC>(static_cast<T*>(p.y) + row * p.C + c0, v);
    } else {
      for (int j = 0; j < VEC; ++j) r = red_combine(p.reduce, r, red_value(p.reduce, v[j]));
    }
  }
  return r;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kRegMaxThreads) gn_row_reg_kernel(const __grid_constant__ GnParams p, int lpg,
                                                                   int slices) {
  const int64_t row = blockIdx.x / slices;
  const int64_t first = int64_t(blockIdx.x % slices) * blockDim.x * kRegVecs;  // first vector of this slice
  const T* x = static_cast<const T*>(p.x) + row * p.C;
  const int64_t nvec = p.C / VEC;
  const int lane = threadIdx.x & 31;
  Vals<VEC> v[kRegVecs];
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t iv = first + threadIdx.x + int64_t(k) * blockDim.x;
    if (iv < nvec) load_vec<T, VEC>(x + iv * VEC, v[k].v);
  }
  RedState r = red_init(p.reduce);
#pragma unroll 1  // one copy of the body (and of its inlined chain interpreters); v[k] may live in local memory
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t iv = first + threadIdx.x + int64_t(k) * blockDim.x;
    // Skip only when the whole warp is past the row end (uniform: the shuffles need all lanes). A group's lanes are
    // all in or all out, since C is a multiple of Cg.
    if (iv - lane < nvec) r = row_reg_vector<T, VEC>(p, v[k], row, iv, iv < nvec, lpg, r);
  }
  if (p.reduce != FUSEDOPS_REDUCE_NONE) {
    __shared__ RedState part[32];
    const int warp = threadIdx.x >> 5;
    r = warp_red(p.reduce, r);
    if (lane == 0) part[warp] = r;
    __syncthreads();
    if (warp == 0) {
      r = lane < int(blockDim.x >> 5) ? part[lane] : red_init(p.reduce);
      r = warp_red(p.reduce, r);
      if (lane == 0) static_cast<T*>(p.y)[row] = from_float<T>(red_finish(p.reduce, r, p.C));
    }
  }
}


// S == 1, same group shapes as gn_row_reg_kernel, but a block keeps one column slice and walks `rows` rows: gamma,
// beta and the one per-channel extra are loaded into registers once per block instead of once per row (the register
// kernel re-read them from L2 for every (row, slice): 3x the bytes of D itself). Each thread holds KV vectors of its
// columns (KV > 1 only for a channel reduction, which needs the whole row in one block of at most 512 threads); the
// next rows are prefetched kTileDepth deep. NEX: 0 or 1 extra input.
constexpr int kTileDepth = 2;
constexpr int kTileMaxRows = 16;  // bounds the reduction partials in shared memory
constexpr int kTileDefaultRows = 8;

template <int VEC, int NEX>
__device__ __forceinline__ void apply_chain_regs(const fusedops_chain& ch, float (&x)[VEC], const float (&e0)[VEC]) {
  const int n = ch.num_steps;
  for (int i = 0; i < n; ++i) {
    const fusedops_step s = ch.steps[i];
    const bool per_channel = NEX > 0 && s.operand >= 0;  // with NEX == 1 the operand can only be extra 0
#pragma unroll
    for (int q = 0; q < VEC; q += 4) {
      const float4 v = per_channel ? make_float4(e0[q], e0[q + 1], e0[q + 2], e0[q + 3])
                                   : make_float4(s.a, s.a, s.a, s.a);
      const float4 r = apply_step4(s, make_float4(x[q], x[q + 1], x[q + 2], x[q + 3]), v);
      x[q] = r.x, x[q + 1] = r.y, x[q + 2] = r.z, x[q + 3] = r.w;
    }
  }
}

// MAXT: 256 for the sliced launch, 512 for a whole-row block (channel reduction); either leaves >= 128 registers.
template <typename T, int VEC, int KV, int NEX, int MAXT>
__global__ void __launch_bounds__(MAXT) gn_row_tile_kernel(const __grid_constant__ GnParams p, int lpg,
                                                                    int slices, int rows) {
  const int64_t row0 = int64_t(blockIdx.x / slices) * rows;
  const int nrows = int(min(int64_t(rows), p.N - row0));
  const int64_t first = int64_t(blockIdx.x % slices) * blockDim.x * KV;  // first vector of this slice
  const int64_t nvec = p.C / VEC;
  const int lane = threadIdx.x & 31;
  const float inv_cg = 1.f / float(p.Cg);
  const T* x = static_cast<const T*>(p.x);

  float ga[KV][VEC], be[KV][VEC], e0[KV][VEC];
  bool in[KV], warp_in[KV];
#pragma unroll
  for (int k = 0; k < KV; ++k) {
    const int64_t iv = first + threadIdx.x + int64_t(k) * blockDim.x;
    in[k] = iv < nvec;
    warp_in[k] = iv - lane < nvec;  // uniform per warp (the shuffles need all lanes); groups are all in or all out
#pragma unroll
    for (int j = 0; j < VEC; ++j) ga[k][j] = be[k][j] = e0[k][j] = 0.f;
    if (in[k]) {
      load_params_vec<VEC>(p.gamma, p.param_dtype, iv * VEC, ga[k]);
      load_params_vec<VEC>(p.beta, p.param_dtype, iv * VEC, be[k]);
      if (NEX > 0) load_params_vec<VEC>(p.ex.p[0], p.param_dtype, iv * VEC, e0[k]);
    }
  }
  // Prefetch ring: buf[d] holds row (r + d); shifted with constant indices so it stays in registers.
  Vals<VEC> buf[kTileDepth][KV];
#pragma unroll
  for (int d = 0; d < kTileDepth; ++d)
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      const int64_t iv = first + threadIdx.x + int64_t(k) * blockDim.x;
      if (d < nrows && in[k]) load_vec<T, VEC>(x + (row0 + d) * p.C + iv * VEC, buf[d][k].v);
    }

  __shared__ RedState part[kTileMaxRows][32];
  const bool reduce = p.reduce != FUSEDOPS_REDUCE_NONE;
#pragma unroll 1  // one copy of the row body (and of its inlined chain interpreters) per KV
  for (int r = 0; r < nrows; ++r) {
    const int64_t row = row0 + r;
    Vals<VEC> cur[KV];
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      cur[k] = buf[0][k];
#pragma unroll
      for (int d = 0; d + 1 < kTileDepth; ++d) buf[d][k] = buf[d + 1][k];
      const int64_t iv = first + threadIdx.x + int64_t(k) * blockDim.x;
      if (r + kTileDepth < nrows && in[k])
        load_vec<T, VEC>(x + (row + kTileDepth) * p.C + iv * VEC, buf[kTileDepth - 1][k].v);
    }
    RedState red = red_init(p.reduce);
#pragma unroll
    for (int k = 0; k < KV; ++k) {
      if (!warp_in[k]) continue;
      float(&v)[VEC] = cur[k].v;
      const int64_t c0 = (first + threadIdx.x + int64_t(k) * blockDim.x) * VEC;
      if (in[k]) {
        if (p.bias) {  // rare (cuBLASLt usually adds it): read per row from L1 rather than held in registers
          float bi[VEC];
          load_params_vec<VEC>(p.bias, p.param_dtype, c0, bi);
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[j] += bi[j];
        }
        apply_chain_regs<VEC, NEX>(p.pre, v, e0[k]);
      }
      float sum = 0.f;
      if (in[k])
#pragma unroll
        for (int j = 0; j < VEC; ++j) sum += v[j];
      for (int o = 1; o < lpg; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float mean = sum * inv_cg;
      float m2 = 0.f;
      if (in[k])
#pragma unroll
        for (int j = 0; j < VEC; ++j) m2 += (v[j] - mean) * (v[j] - mean);
      for (int o = 1; o < lpg; o <<= 1) m2 += __shfl_xor_sync(0xffffffffu, m2, o);
      const float rstd = rsqrtf(m2 * inv_cg + p.eps);
      if (in[k]) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = (v[j] - mean) * (rstd * ga[k][j]) + be[k][j];
        apply_chain_regs<VEC, NEX>(p.post, v, e0[k]);
        if (!reduce) {
          store_vec<T, VEC>(static_cast<T*>(p.y) + row * p.C + c0, v);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) red = red_combine(p.reduce, red, red_value(p.reduce, v[j]));
        }
      }
    }
    if (reduce) {  // per-warp partial of this row; combined after the loop (one barrier per block, not per row)
      red = warp_red(p.reduce, red);
      if (lane == 0) part[r][threadIdx.x >> 5] = red;
    }
  }
  if (reduce) {
    __syncthreads();
    const int warp = threadIdx.x >> 5, nw = int(blockDim.x >> 5);
    for (int r = warp; r < nrows; r += nw) {
      RedState red = lane < nw ? part[r][lane] : red_init(p.reduce);
      red = warp_red(p.reduce, red);
      if (lane == 0) static_cast<T*>(p.y)[row0 + r] = from_float<T>(red_finish(p.reduce, red, p.C));
    }
  }
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops
