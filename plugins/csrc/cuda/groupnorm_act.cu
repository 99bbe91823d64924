// GroupNormAct on CUDA: Y = reduce_C(post(GroupNorm(pre(X)))), X of shape (N, C, S).
//
// Kernels (launch shapes in docs/kernels.md):
//  - gn_row_kernel      S == 1 (rank-2 input, the GEMM epilogue): one block per sample; the row lives in shared memory,
//                       so X is read once; group statistics are exact two-pass over shared memory.
//  - gn_group_kernel    S > 1, one (sample, group) is L = C/G*S contiguous elements, split into P chunks:
//                       FUSED (P == 1): one block computes the statistics then applies (second read hits L1/L2);
//                       STATS + APPLY (P > 1): per-chunk (n, mean, M2) partials to the workspace, then an apply pass
//                       whose blocks combine their group's P partials with Chan's formula.
//                       X is read twice, Y written once.
//  - gn_onepass_kernel  the SPLIT case in one persistent launch that reads X once: each block takes the next chunk
//                       (an atomic ticket, so chunks start in group order), keeps pre(x) of it in shared memory,
//                       publishes its partial statistics, waits until all chunks of its group have, then normalises
//                       from shared memory. Used when the device keeps more resident blocks than a group has chunks
//                       (then the wait cannot deadlock: see the kernel); otherwise STATS + APPLY run.
//  - reduce over C with S > 1: STATS, gn_finalize_kernel ((mean, rstd) per group), gn_reduce_kernel (one thread per
//                       spatial position looping over channels; the normalised (N, C, S) tensor is never written).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "cuda/device_common.cuh"
#include "cuda/groupnorm_kernels.cuh"

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
// FUSEDOPS_GELU=erff selects PRE_GELU (erff) for A/B measurements.
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

// ---------------------------------------------------------------------------------------------------------------
bool aligned(const void* ptr, size_t bytes) { return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

// Groups per wave of the SPLIT path. Measured on H200 (docs/kernels.md): waves sized to a fraction of L2 made model 4
// slower (1.67 -> 2.12-2.62 ms; the waves under-fill the GPU and the apply pass gained no DRAM traffic), so the default
// is one launch for all groups. FUSEDOPS_GN_L2_FRACTION=<f> re-enables waves of f x L2 for experiments.
int64_t split_wave_groups(const GnPlan& plan, const fusedops_groupnorm_desc& d, int64_t groups) {
  int dev = 0, l2 = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || l2 <= 0) {
    cudaGetLastError();  // clear: an unanswered attribute query is not an error of this call
    return groups;
  }
  double fraction = 0.0;
  if (const char* env = getenv("FUSEDOPS_GN_L2_FRACTION")) fraction = atof(env);
  if (fraction <= 0.0) return groups;
  const double group_bytes = double(plan.group_len) * double(elem_size(d.x_dtype));
  int64_t wave = int64_t(fraction * double(l2) / group_bytes);
  wave = std::max<int64_t>(wave, ceil_div(int64_t(sms) * 4, plan.chunks));
  return std::max<int64_t>(1, std::min(wave, groups));
}

// Rows a block of the column-slice epilogue walks: FUSEDOPS_EPI_ROWS=<1..16> for measurements; by default enough
// rows to amortise the parameter loads while keeping about one full wave of blocks on the device (resident blocks
// from the occupancy calculator: the whole-row reduction kernels hold 1 block an SM, the sliced ones several).
template <typename K>
int tile_rows(int64_t N, int64_t slices, int64_t threads, K kernel) {
  if (const char* env = getenv("FUSEDOPS_EPI_ROWS")) {
    const int r = atoi(env);
    if (r >= 1) return std::min(r, kTileMaxRows);
  }
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) !=
                                               cudaSuccess || sms <= 0) {
    cudaGetLastError();  // clear: an unanswered query is not an error of this call
    sms = 132;
  }
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, int(threads), 0) != cudaSuccess || per_sm <= 0) {
    cudaGetLastError();
    per_sm = int(std::max<int64_t>(1, 2048 / threads));
  }
  // Rounded up, so the blocks fit in one wave: rounding down gave model 2's whole-row reduction 147 blocks of 7 rows
  // for 132 resident slots (two waves, 62 us) where 128 blocks of 8 take 37 us (H200, 2026-11-23).
  const int64_t resident = int64_t(sms) * per_sm;
  return int(std::max<int64_t>(1, std::min<int64_t>(kTileDefaultRows, ceil_div(N * slices, resident))));
}

using GroupKernel = void (*)(const GnParams);

// The split/fused kernel for a vector width and pre kind. Vector paths have the PRE_* specialisations; the scalar
// path (misaligned, or S odd) interprets any chain.
template <typename T, int VEC, int MODE>
GroupKernel group_kernel_pre(int pre_kind) {
  switch (pre_kind) {
    case PRE_NONE: return gn_group_kernel<T, VEC, MODE, PRE_NONE>;
    case PRE_GELU: return gn_group_kernel<T, VEC, MODE, PRE_GELU>;
    case PRE_GELU_FAST: return gn_group_kernel<T, VEC, MODE, PRE_GELU_FAST>;
    default: return gn_group_kernel<T, VEC, MODE, PRE_CHAIN>;
  }
}

template <typename T, int MODE>
GroupKernel group_kernel(int vec_n, int pre_kind) {
  constexpr int kVec = 16 / sizeof(T);
  if (vec_n == kVec) return group_kernel_pre<T, kVec, MODE>(pre_kind);
  if (vec_n == kVec / 2) return group_kernel_pre<T, kVec / 2, MODE>(pre_kind);
  return gn_group_kernel<T, 1, MODE, PRE_CHAIN>;
}

using OnepassKernel = void (*)(const GnParams, uint32_t);

template <typename T, int VEC>
OnepassKernel onepass_kernel_pre(int pre_kind) {
  switch (pre_kind) {
    case PRE_NONE: return gn_onepass_kernel<T, VEC, PRE_NONE>;
    case PRE_GELU: return gn_onepass_kernel<T, VEC, PRE_GELU>;
    case PRE_GELU_FAST: return gn_onepass_kernel<T, VEC, PRE_GELU_FAST>;
    default: return gn_onepass_kernel<T, VEC, PRE_CHAIN>;
  }
}
template <typename T>
OnepassKernel onepass_kernel(int vec_n, int pre_kind) {
  constexpr int kVec = 16 / sizeof(T);
  if (vec_n == kVec) return onepass_kernel_pre<T, kVec>(pre_kind);
  if (vec_n == kVec / 2) return onepass_kernel_pre<T, kVec / 2>(pre_kind);
  return gn_onepass_kernel<T, 1, PRE_CHAIN>;
}

// Launches the one-pass kernel when the device keeps at least twice as many of its blocks resident as a group has
// chunks (see gn_onepass_kernel); returns false (nothing enqueued) otherwise. FUSEDOPS_GN_ONEPASS=0 disables it.
template <typename T>
bool launch_onepass(const GnLaunch& a, const GnPlan& plan, GnParams p, int vec_n, int pre_kind, cudaError_t* err) {
  const char* env = getenv("FUSEDOPS_GN_ONEPASS");
  if (plan.onepass_chunks < 1 || (env && strcmp(env, "0") == 0)) return false;
  const OnepassKernel kernel = onepass_kernel<T>(vec_n, pre_kind);
  const size_t smem = size_t(plan.onepass_chunk) * sizeof(float);
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlock, smem) != cudaSuccess) {
    cudaGetLastError();  // clear: the two-pass path still runs
    return false;
  }
  const int64_t resident = int64_t(sms) * per_sm;
  if (resident < 2 * plan.onepass_chunks) return false;
  const int64_t groups = a.d->N * a.d->num_groups;
  char* ws = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(a.workspace), kAlign));
  p.arrived = reinterpret_cast<unsigned*>(ws);
  p.partials = reinterpret_cast<Welford*>(ws + onepass_partials_offset(groups));
  p.chunk = plan.onepass_chunk;
  p.P = int32_t(plan.onepass_chunks);
  const uint32_t tickets = uint32_t(groups * plan.onepass_chunks);
  *err = cudaMemsetAsync(p.arrived, 0, size_t(groups + 1) * sizeof(unsigned), a.stream);
  if (*err != cudaSuccess) return true;
  kernel<<<unsigned(std::min<int64_t>(tickets, resident)), kBlock, smem, a.stream>>>(p, tickets);
  *err = cudaGetLastError();
  return true;
}

template <typename T>
cudaError_t launch_typed(const GnLaunch& a, const GnPlan& plan, GnParams& p) {
  constexpr int kVec = 16 / sizeof(T);
  const fusedops_groupnorm_desc& d = *a.d;
  const size_t pbytes = size_t(elem_size(d.param_dtype));
  bool params_aligned = aligned(a.gamma, pbytes * kVec) && aligned(a.beta, pbytes * kVec) &&
                        aligned(a.bias, pbytes * kVec);
  for (int k = 0; k < FUSEDOPS_MAX_EXTRAS; ++k) params_aligned = params_aligned && aligned(p.ex.p[k], pbytes * kVec);
  const bool io_aligned = aligned(a.x, 16) && aligned(a.y, 16);

  if (plan.kind == GnPlan::ROW) {
    const bool vec = io_aligned && params_aligned && d.C % kVec == 0;
    const int64_t Cg = d.C / d.num_groups;
    const int vec_n = vec ? kVec : 1;
    const int64_t lpg = Cg / vec_n, nvec_reg = d.C / vec_n;
    const bool reduce = d.reduce != FUSEDOPS_REDUCE_NONE;
    const bool pow2_groups = Cg % vec_n == 0 && lpg <= 32 && (lpg & (lpg - 1)) == 0;
    // Default: the column-slice kernel that walks several rows; FUSEDOPS_EPI_KERNEL=reg selects the one-row register
    // kernel (kept for A/B measurements and for chains with more than one extra input).
    const char* epi_env = getenv("FUSEDOPS_EPI_KERNEL");
    const bool tile_off = epi_env && strcmp(epi_env, "reg") == 0;
    const int32_t nex = fusedops_num_extras(&d.pre, &d.post);
    if (!tile_off && vec && pow2_groups && nex <= 1 && (!reduce || nvec_reg <= 4 * 512)) {
      const int kv = !reduce || nvec_reg <= 512 ? 1 : nvec_reg <= 1024 ? 2 : 4;
      const int64_t warps_needed = ceil_div(ceil_div(nvec_reg, kv), 32);
      const int64_t threads = reduce ? warps_needed * 32 : std::min<int64_t>(kRegSliceThreads, warps_needed * 32);
      const int64_t slices = ceil_div(nvec_reg, threads * kv);
      void (*kernel)(const GnParams, int, int, int);
      if (!reduce) kernel = nex ? gn_row_tile_kernel<T, kVec, 1, 1, 256> : gn_row_tile_kernel<T, kVec, 1, 0, 256>;
      else if (kv == 1) kernel = nex ? gn_row_tile_kernel<T, kVec, 1, 1, 512> : gn_row_tile_kernel<T, kVec, 1, 0, 512>;
      else if (kv == 2) kernel = nex ? gn_row_tile_kernel<T, kVec, 2, 1, 512> : gn_row_tile_kernel<T, kVec, 2, 0, 512>;
      else kernel = nex ? gn_row_tile_kernel<T, kVec, 4, 1, 512> : gn_row_tile_kernel<T, kVec, 4, 0, 512>;
      const int rows = tile_rows(d.N, slices, threads, kernel);
      const int64_t blocks = ceil_div(d.N, rows) * slices;
      if (blocks <= INT32_MAX) {
        kernel<<<dim3(unsigned(blocks)), unsigned(threads), 0, a.stream>>>(p, int(lpg), int(slices), rows);
        return cudaGetLastError();
      }
    }
    if (pow2_groups && (!reduce || nvec_reg <= int64_t(kRegMaxThreads) * kRegVecs)) {
      // A reduction needs the whole row in one block; otherwise slices of kRegSliceThreads threads.
      const int64_t warps_needed = ceil_div(ceil_div(nvec_reg, kRegVecs), 32);
      const int64_t threads = reduce ? warps_needed * 32 : std::min<int64_t>(kRegSliceThreads, warps_needed * 32);
      const int64_t slices = ceil_div(nvec_reg, threads * kRegVecs);
      if (d.N * slices <= INT32_MAX) {
        auto kernel = vec ? gn_row_reg_kernel<T, kVec> : gn_row_reg_kernel<T, 1>;
        kernel<<<dim3(unsigned(d.N * slices)), unsigned(threads), 0, a.stream>>>(p, int(lpg), int(slices));
        return cudaGetLastError();
      }
    }
    const int64_t nvec = vec ? d.C / kVec : d.C;
    int threads = int(std::min<int64_t>(512, std::max<int64_t>(32, ceil_div(ceil_div(nvec, 8), 32) * 32)));
    auto kernel = vec ? gn_row_kernel<T, kVec> : gn_row_kernel<T, 1>;
    if (plan.smem_bytes > 48 * 1024) {
      cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem_bytes));
      if (e != cudaSuccess) return e;
    }
    kernel<<<dim3(unsigned(d.N)), threads, plan.smem_bytes, a.stream>>>(p);
    return cudaGetLastError();
  }

  // Vector width: 16-byte vectors when S is a multiple of kVec, else 8-byte ones when S is a multiple of kVec / 2
  // (model 4 in 16-bit: S = 258 * 258 = 8 * 8320 + 4, which fell to the scalar path and ran 3x slower than
  // float32), else scalar.
  const int vec_n = io_aligned && d.S % kVec == 0                                          ? kVec
                    : aligned(a.x, 8) && aligned(a.y, 8) && d.S % (kVec / 2) == 0 ? kVec / 2
                                                                                        : 1;
  p.div_sv.init(uint32_t(d.S / vec_n));
  const int64_t groups = d.N * d.num_groups;
  dim3 grid(unsigned(groups), unsigned(plan.chunks));
  int threads = kBlock;
  if (plan.kind == GnPlan::FUSED) {
    threads = int(std::min<int64_t>(kBlock, std::max<int64_t>(32, ceil_div(ceil_div(plan.chunk / vec_n, 4), 32) * 32)));
  }
  const char* gelu_env = getenv("FUSEDOPS_GELU");
  const int gelu_kind = gelu_env && strcmp(gelu_env, "erff") == 0 ? PRE_GELU : PRE_GELU_FAST;
  const int pre_kind = d.pre.num_steps == 0                                    ? PRE_NONE
                       : d.pre.num_steps == 1 && d.pre.steps[0].op == FUSEDOPS_STEP_GELU ? gelu_kind
                                                                                      : PRE_CHAIN;
  const GroupKernel fused = group_kernel<T, MODE_FUSED>(vec_n, pre_kind);
  const GroupKernel stats = group_kernel<T, MODE_STATS>(vec_n, pre_kind);
  const GroupKernel apply = group_kernel<T, MODE_APPLY>(vec_n, pre_kind);
  switch (plan.kind) {
    case GnPlan::FUSED: fused<<<grid, threads, 0, a.stream>>>(p); break;
    case GnPlan::SPLIT: {
      cudaError_t onepass_err = cudaSuccess;
      if (launch_onepass<T>(a, plan, p, vec_n, pre_kind, &onepass_err)) return onepass_err;
      // Waves of groups whose X fits in part of the L2 cache: the apply pass then re-reads X from L2, not DRAM
      // (2 DRAM passes instead of 3). The wave must still hold enough blocks to fill the GPU.
      const int64_t wave = split_wave_groups(plan, d, groups);
      for (int64_t g0 = 0; g0 < groups; g0 += wave) {
        p.group_offset = g0;
        grid.x = unsigned(std::min(wave, groups - g0));
        stats<<<grid, threads, 0, a.stream>>>(p);
        apply<<<grid, threads, 0, a.stream>>>(p);
      }
      p.group_offset = 0;
      break;
    }
    default: {  // SPLIT_REDUCE
      stats<<<grid, threads, 0, a.stream>>>(p);
      gn_finalize_kernel<<<unsigned(ceil_div(groups, 256)), 256, 0, a.stream>>>(p, groups);
      gn_reduce_kernel<T><<<unsigned(ceil_div(d.S, kBlock) * d.N), kBlock, 0, a.stream>>>(p);
      break;
    }
  }
  return cudaGetLastError();
}

}  // namespace

int set_error(char* err, size_t err_len, int code, const char* fmt, ...) {
  if (err && err_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return code;
}

GnPlan plan_groupnorm(const fusedops_groupnorm_desc& d) {
  GnPlan plan;
  const int64_t Cg = d.C / d.num_groups;
  const int64_t groups = d.N * d.num_groups;
  plan.group_len = Cg * d.S;
  const size_t row_smem = align_up(size_t(d.C) * 4, 8) + size_t(d.num_groups) * 8;
  if (d.S == 1 && row_smem <= kRowSmemMax) {
    plan.kind = GnPlan::ROW;
    plan.smem_bytes = row_smem;
    return plan;
  }
  const int64_t L = plan.group_len;
  // Chunks of at most chunk_max elements, but enough of them for kTargetBlocks blocks when there are few groups.
  const auto split = [&](int64_t chunk_max, int64_t* chunk) {
    const int64_t chunk_min = 2048;
    int64_t P = ceil_div(L, chunk_max);
    if (groups * P < kTargetBlocks) P = std::max(P, std::min(ceil_div(L, chunk_min), ceil_div(kTargetBlocks, groups)));
    P = std::min<int64_t>(std::max<int64_t>(P, 1), 65535);  // gridDim.y limit
    *chunk = int64_t(align_up(size_t(ceil_div(L, P)), 8));
    return ceil_div(L, *chunk);
  };
  int64_t chunk = 0;
  const int64_t P = split(int64_t(kBlock) * (16 / elem_size(d.x_dtype)) * 16, &chunk);  // 16 vectors a thread
  plan.chunk = chunk;
  plan.chunks = P;
  if (d.reduce != FUSEDOPS_REDUCE_NONE) {
    plan.kind = GnPlan::SPLIT_REDUCE;
    plan.workspace = align_up(size_t(groups * P) * sizeof(Welford), kAlign) + size_t(groups) * sizeof(float2) + kAlign;
  } else if (P == 1) {
    plan.kind = GnPlan::FUSED;
  } else {
    plan.kind = GnPlan::SPLIT;
    plan.workspace = size_t(groups * P) * sizeof(Welford) + kAlign;
    int64_t chunk1 = 0;
    const int64_t P1 = split(kOnepassMaxChunk, &chunk1);  // the same split, capped by the shared-memory chunk
    if (groups * P1 < int64_t(UINT32_MAX)) {
      plan.onepass_chunk = chunk1;
      plan.onepass_chunks = P1;
      plan.workspace = std::max(plan.workspace, onepass_partials_offset(groups) + size_t(groups * P1) * sizeof(Welford)
                                                    + kAlign);
    }
  }
  return plan;
}

int check_cuda_limits(const fusedops_groupnorm_desc& d, const char* op, char* err, size_t err_len) {
  const int64_t groups = d.N * d.num_groups;
  const int64_t L = d.C / d.num_groups * d.S;
  if (groups > INT32_MAX || L > int64_t(UINT32_MAX) || d.C > int64_t(UINT32_MAX))
    return set_error(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                     "%s: N*num_groups=%lld groups of %lld elements exceed the CUDA kernel's index range", op,
                     (long long)groups, (long long)L);
  return FUSEDOPS_OK;
}

cudaError_t launch_groupnorm(const GnLaunch& a) {
  const fusedops_groupnorm_desc& d = *a.d;
  const GnPlan plan = plan_groupnorm(d);
  GnParams p{};
  p.x = a.x;
  p.y = a.y;
  p.gamma = a.gamma;
  p.beta = a.beta;
  p.bias = a.bias;
  for (int k = 0; k < FUSEDOPS_MAX_EXTRAS; ++k) p.ex.p[k] = (a.extras && k < a.num_extras) ? a.extras[k] : nullptr;
  p.param_dtype = d.param_dtype;
  p.reduce = d.reduce;
  p.pre = d.pre;
  p.post = d.post;
  p.N = d.N;
  p.C = d.C;
  p.S = d.S;
  p.G = d.num_groups;
  p.Cg = d.C / d.num_groups;
  p.L = plan.group_len;
  p.chunk = plan.chunk;
  p.P = int32_t(plan.chunks);
  p.eps = d.epsilon;
  p.div_cg.init(uint32_t(p.Cg));
  p.div_sv.init(1);
  if (plan.workspace) {
    char* ws = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(a.workspace), kAlign));
    const size_t partial_bytes = size_t(d.N * d.num_groups * plan.chunks) * sizeof(Welford);
    p.partials = reinterpret_cast<Welford*>(ws);
    p.stats = reinterpret_cast<float2*>(ws + align_up(partial_bytes, kAlign));
  }
  switch (d.x_dtype) {
    case FUSEDOPS_F16: return launch_typed<__half>(a, plan, p);
    case FUSEDOPS_BF16: return launch_typed<__nv_bfloat16>(a, plan, p);
    default: return launch_typed<float>(a, plan, p);
  }
}

}  // namespace cuda
}  // namespace fusedops

using fusedops::cuda::set_error;

extern "C" {

FUSEDOPS_API size_t fusedops_groupnorm_act_workspace_size(const fusedops_groupnorm_desc* d) {
  if (!d || fusedops_groupnorm_act_check(d, nullptr, 0) != FUSEDOPS_OK) return 0;
  return fusedops::cuda::plan_groupnorm(*d).workspace;
}

FUSEDOPS_API int fusedops_groupnorm_act_cuda(const fusedops_groupnorm_desc* d, const void* x, const void* gamma,
                                             const void* beta, const void* const* extras, int32_t num_extras,
                                             void* y, void* workspace, size_t workspace_size,
                                             fusedops_stream_t stream, char* err, size_t err_len) {
  if (!d) return set_error(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "GroupNormAct: descriptor is NULL");
  int rc = fusedops_groupnorm_act_check(d, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  if (!x || !gamma || !beta || !y)
    return set_error(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "GroupNormAct: %s pointer is NULL",
                     !x ? "X" : !gamma ? "gamma" : !beta ? "beta" : "Y");
  const int32_t need = fusedops_num_extras(&d->pre, &d->post);
  if (num_extras < need || num_extras > FUSEDOPS_MAX_EXTRAS)
    return set_error(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                     "GroupNormAct: chains reference %d extra input(s), got %d", need, num_extras);
  for (int k = 0; k < need; ++k)
    if (!extras || !extras[k])
      return set_error(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "GroupNormAct: extra input %d is NULL", k);
  rc = fusedops::cuda::check_cuda_limits(*d, "GroupNormAct", err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  const fusedops::cuda::GnPlan plan = fusedops::cuda::plan_groupnorm(*d);
  if (plan.workspace > 0 && (!workspace || workspace_size < plan.workspace))
    return set_error(err, err_len, FUSEDOPS_ERR_WORKSPACE, "GroupNormAct: workspace of %zu bytes, need %zu",
                     workspace ? workspace_size : size_t(0), plan.workspace);
  fusedops::cuda::GnLaunch a{d, x, nullptr, gamma, beta, extras, num_extras, y, workspace, workspace_size,
                             reinterpret_cast<cudaStream_t>(stream)};
  const cudaError_t e = fusedops::cuda::launch_groupnorm(a);
  if (e != cudaSuccess)
    return set_error(err, err_len, FUSEDOPS_ERR_CUDA, "GroupNormAct: kernel launch failed: %s", cudaGetErrorString(e));
  return FUSEDOPS_OK;
}

}  // extern "C"
