// GroupNorm kernels for S > 1 (one (sample, group) is L = C/G*S contiguous elements): gn_group_kernel (FUSED, or
// STATS + APPLY), gn_onepass_kernel, and the channel reduction's gn_finalize_kernel + gn_reduce_kernel. Described in
// gn_kernels.cuh; device code, included via it.
#pragma once

#include "cuda/gn_kernels_common.cuh"

namespace fusedops {
namespace cuda {
namespace {

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

}  // namespace
}  // namespace cuda
}  // namespace fusedops
