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
//  - reduce over C with S > 1: STATS, gn_finalize_kernel ((mean, rstd) per group), gn_reduce_kernel (one thread per
//                       spatial position looping over channels; the normalised (N, C, S) tensor is never written).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
};

// ---------------------------------------------------------------------------------------------------------------
// S > 1: one (sample, group) per blockIdx.x, chunk blockIdx.y of it.
enum GroupMode { MODE_STATS = 0, MODE_APPLY = 1, MODE_FUSED = 2 };
// How the pre chain is applied: interpreted (any chain), none, or GELU inlined (model 4's ConvTranspose->GELU->GN,
// where the chain runs twice per element and its cost decides whether the kernel stays memory-bound).
enum PreKind { PRE_CHAIN = 0, PRE_NONE = 1, PRE_GELU = 2 };

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
  } else if (PRE == PRE_CHAIN) {
    apply_chain<VEC, false>(&p.pre, v, c, &p.ex, p.param_dtype);
  }
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

  float mean = 0.f, rstd = 0.f;
  if (MODE == MODE_STATS || MODE == MODE_FUSED) {
    Welford w{0.f, 0.f, 0.f};
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
        if (iv < vend) {
          pre_transform<VEC, PRE>(p, v[u], c0 + p.div_sv.div(uint32_t(iv)));
          welford_add_vec<VEC>(w, v[u]);
        }
      }
    }
    w = block_welford(w);
    if (MODE == MODE_STATS) {
      if (threadIdx.x == 0) p.partials[gi * p.P + chunk_idx] = w;
      return;
    }
    mean = w.mean;
    rstd = rsqrtf(w.m2 / w.n + p.eps);
  } else {
    Welford w{0.f, 0.f, 0.f};
    for (int i = threadIdx.x; i < p.P; i += blockDim.x) w = welford_combine(w, p.partials[gi * p.P + i]);
    w = block_welford(w);
    mean = w.mean;
    rstd = rsqrtf(w.m2 / w.n + p.eps);
  }

  T* y = static_cast<T*>(p.y) + base;
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
      if (iv < vend) {
        const int64_t c = c0 + p.div_sv.div(uint32_t(iv));
        pre_transform<VEC, PRE>(p, v[u], c);
        // (x - mean) * scale + beta: exact beta when x == mean (a one-element group), unlike x * scale + shift.
        const float scale = rstd * load_param(p.gamma, p.param_dtype, c);
        const float b = load_param(p.beta, p.param_dtype, c);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[u][j] = (v[u][j] - mean) * scale + b;
        apply_chain<VEC, false>(&p.post, v[u], c, &p.ex, p.param_dtype);
        store_vec<T, VEC>(y + iv * VEC, v[u]);
      }
    }
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
  for (int64_t it = threadIdx.x; it < nvec; it += int64_t(blockDim.x) * kUnroll) {
    float v[kUnroll][VEC];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = it + int64_t(u) * blockDim.x;
      if (iv < nvec) load_vec<T, VEC>(x + iv * VEC, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t iv = it + int64_t(u) * blockDim.x;
      if (iv < nvec) {
        if (p.bias) {
          float b[VEC];
          load_params_vec<VEC>(p.bias, p.param_dtype, iv * VEC, b);
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[u][j] += b[j];
        }
        apply_chain<VEC, true>(&p.pre, v[u], iv * VEC, &p.ex, p.param_dtype);
#pragma unroll
        for (int j = 0; j < VEC; ++j) z[iv * VEC + j] = v[u][j];
      }
    }
  }
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
    if (Cg % vec_n == 0 && lpg <= 32 && (lpg & (lpg - 1)) == 0 &&
        (!reduce || nvec_reg <= int64_t(kRegMaxThreads) * kRegVecs)) {
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

  const bool vec = io_aligned && d.S % kVec == 0;
  const int vec_n = vec ? kVec : 1;
  p.div_sv.init(uint32_t(d.S / vec_n));
  const int64_t groups = d.N * d.num_groups;
  dim3 grid(unsigned(groups), unsigned(plan.chunks));
  int threads = kBlock;
  if (plan.kind == GnPlan::FUSED) {
    threads = int(std::min<int64_t>(kBlock, std::max<int64_t>(32, ceil_div(ceil_div(plan.chunk / vec_n, 4), 32) * 32)));
  }
  const int pre_kind = d.pre.num_steps == 0                                    ? PRE_NONE
                       : d.pre.num_steps == 1 && d.pre.steps[0].op == FUSEDOPS_STEP_GELU ? PRE_GELU
                                                                                      : PRE_CHAIN;
  // Vector path: PRE_* specialisations; scalar path (S % VEC != 0 or misaligned): the interpreted chain only.
#define FUSEDOPS_LAUNCH_GROUP(MODE)                                                                      \
  (!vec                      ? gn_group_kernel<T, 1, MODE, PRE_CHAIN>                                   \
   : pre_kind == PRE_NONE    ? gn_group_kernel<T, kVec, MODE, PRE_NONE>                                 \
   : pre_kind == PRE_GELU    ? gn_group_kernel<T, kVec, MODE, PRE_GELU>                                 \
                             : gn_group_kernel<T, kVec, MODE, PRE_CHAIN>)<<<grid, threads, 0, a.stream>>>(p)
  switch (plan.kind) {
    case GnPlan::FUSED: FUSEDOPS_LAUNCH_GROUP(MODE_FUSED); break;
    case GnPlan::SPLIT: {
      // Waves of groups whose X fits in part of the L2 cache: the apply pass then re-reads X from L2, not DRAM
      // (2 DRAM passes instead of 3). The wave must still hold enough blocks to fill the GPU.
      const int64_t wave = split_wave_groups(plan, d, groups);
      for (int64_t g0 = 0; g0 < groups; g0 += wave) {
        p.group_offset = g0;
        grid.x = unsigned(std::min(wave, groups - g0));
        FUSEDOPS_LAUNCH_GROUP(MODE_STATS);
        FUSEDOPS_LAUNCH_GROUP(MODE_APPLY);
      }
      p.group_offset = 0;
      break;
    }
    default: {  // SPLIT_REDUCE
      FUSEDOPS_LAUNCH_GROUP(MODE_STATS);
      gn_finalize_kernel<<<unsigned(ceil_div(groups, 256)), 256, 0, a.stream>>>(p, groups);
      gn_reduce_kernel<T><<<unsigned(ceil_div(d.S, kBlock) * d.N), kBlock, 0, a.stream>>>(p);
      break;
    }
  }
#undef FUSEDOPS_LAUNCH_GROUP
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
  const int64_t chunk_max = int64_t(kBlock) * (16 / elem_size(d.x_dtype)) * 16;  // 16 vectors per thread
  const int64_t chunk_min = 2048;
  int64_t P = ceil_div(L, chunk_max);
  if (groups * P < kTargetBlocks) P = std::max(P, std::min(ceil_div(L, chunk_min), ceil_div(kTargetBlocks, groups)));
  P = std::max<int64_t>(P, 1);
  P = std::min<int64_t>(P, 65535);  // gridDim.y limit
  int64_t chunk = align_up(size_t(ceil_div(L, P)), 8);
  P = ceil_div(L, chunk);
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
