// GroupNorm kernels for S == 1 (rank-2 input, the GEMM epilogue): gn_row_kernel (row in shared memory),
// gn_row_reg_kernel (row in registers) and gn_row_tile_kernel (column slice over several rows). Described in
// gn_kernels.cuh; device code, included via it.
#pragma once

#include <cooperative_groups.h>

#include "cuda/gn_kernels_common.cuh"

namespace fusedops {
namespace cuda {
namespace {

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
// columns (KV > 1 only for a channel reduction in one block of at most 512 threads per row, the layout before sm_90;
// on sm_90 a reduced row is cut into slices that one cluster combines); the next rows are prefetched kTileDepth deep.
// NEX: 0 or 1 extra input.
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

// A channel reduction whose row is cut into `slices` blocks launched as one thread-block cluster (sm_90; the plan
// launches a cluster only there): each block leaves its rows' partials in shared memory, and the cluster's first block
// combines them in slice order through distributed shared memory. One kernel, no workspace, no counters to reset, so
// concurrent runs of one plan stay independent; the whole-row single block it replaces ran one SM per row (12.9 us
// for model 2's batch-1 row in bfloat16 on the H200, against 3.5 us for model 1's sliced epilogue).
template <typename T>
__device__ __forceinline__ void finish_row_reduction_in_cluster(const GnParams& p, RedState* slice_part, int slices,
                                                                int64_t row0, int nrows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();  // every slice's partials written
  if (cluster.block_rank() == 0)
    for (int r = int(threadIdx.x); r < nrows; r += int(blockDim.x)) {
      RedState red = slice_part[r];
      for (int s = 1; s < slices; ++s) red = red_combine(p.reduce, red, *cluster.map_shared_rank(slice_part + r, s));
      static_cast<T*>(p.y)[row0 + r] = from_float<T>(red_finish(p.reduce, red, p.C));
    }
  cluster.sync();  // no block leaves (freeing its shared memory) before the first block has read it
#else
  __trap();  // unreachable: plans cut a reduced row into slices only on sm_90
#endif
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
    __shared__ RedState slice_part[kTileMaxRows];
    for (int r = warp; r < nrows; r += nw) {
      RedState red = lane < nw ? part[r][lane] : red_init(p.reduce);
      red = warp_red(p.reduce, red);
      if (lane != 0) continue;
      if (slices == 1)
        static_cast<T*>(p.y)[row0 + r] = from_float<T>(red_finish(p.reduce, red, p.C));
      else
        slice_part[r] = red;
    }
    if (slices > 1) finish_row_reduction_in_cluster<T>(p, slice_part, slices, row0, nrows);
  }
}


}  // namespace
}  // namespace cuda
}  // namespace fusedops
