// D (M, C) = X (M, K) · Wᵀ for M <= 16 (skinny_gemm.h says why). A block of 8 warps owns 32 consecutive rows of W
// (channels); each warp streams 4 of them, lane l reading the 16-byte vectors l, l + 32, ... of each row (a warp
// reads 512 contiguous bytes of a row per step), and multiplies each W vector by the same vector of every X row.
// W is read once, with the streaming cache hint (it is read once and would only evict X from L1); X (at most 16 rows,
// 512 KB in float32 at K = 8192) is read through L1 by every warp of a block, so the 4 rows a warp streams together
// keep X's L1 traffic at M/4 times W's. Float32 accumulation: per lane a sequential FMA chain over its vectors, then
// a butterfly sum over the warp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/cutlass/gemm_choice.h"
#include "cuda/skinny_gemm.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;
constexpr int kChannelsPerBlock = kWarps * kRowsPerWarp;

// 16 bytes of T as floats.
template <typename T>
struct Vec16;
template <>
struct Vec16<float> {
  static constexpr int n = 4;
  __device__ static void to_float(const uint4& q, float* f) {
    f[0] = __uint_as_float(q.x), f[1] = __uint_as_float(q.y), f[2] = __uint_as_float(q.z), f[3] = __uint_as_float(q.w);
  }
  __device__ static float store(float v) { return v; }
};
// 16-bit types: four pairs, each converted with the type's own pair conversion.
__device__ inline float2 pair_to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ inline float2 pair_to_float2(__half2 v) { return __half22float2(v); }
__device__ inline void store_as(float v, __nv_bfloat16* out) { *out = __float2bfloat16_rn(v); }
__device__ inline void store_as(float v, __half* out) { *out = __float2half_rn(v); }

template <typename T, typename Pair>
struct Vec16Of16Bit {
  static constexpr int n = 8;
  __device__ static void to_float(const uint4& q, float* f) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = pair_to_float2(*reinterpret_cast<const Pair*>(&w[i]));
      f[2 * i] = p.x, f[2 * i + 1] = p.y;
    }
  }
  __device__ static T store(float v) {
    T out;
    store_as(v, &out);
    return out;
  }
};
template <>
struct Vec16<__nv_bfloat16> : Vec16Of16Bit<__nv_bfloat16, __nv_bfloat162> {};
template <>
struct Vec16<__half> : Vec16Of16Bit<__half, __half2> {};

// x: M rows of nvec 16-byte vectors; w: C rows of nvec vectors; d: (M, C) row-major.
template <typename T, int M>
__global__ void __launch_bounds__(kWarps * 32) skinny_gemm_kernel(const uint4* __restrict__ x,
                                                                  const uint4* __restrict__ w, T* __restrict__ d,
                                                                  int C, int nvec) {
  using V = Vec16<T>;
  const int lane = threadIdx.x & 31;
  const int c0 = blockIdx.x * kChannelsPerBlock + (threadIdx.x >> 5) * kRowsPerWarp;
  if (c0 >= C) return;
  const int rows = min(kRowsPerWarp, C - c0);
  const uint4* wrow = w + size_t(c0) * size_t(nvec);
  float acc[kRowsPerWarp][M];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;

#pragma unroll 2
  for (int v = lane; v < nvec; v += 32) {
    float wf[kRowsPerWarp][V::n];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      // rows past C (the last block's tail) read row c0 again and are never stored: no branch in the stream
      const uint4 q = __ldcs(wrow + size_t(r < rows ? r : 0) * size_t(nvec) + v);
      V::to_float(q, wf[r]);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xf[V::n];
      V::to_float(__ldg(x + size_t(m) * size_t(nvec) + v), xf);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int e = 0; e < V::n; ++e) acc[r][m] = fmaf(wf[r][e], xf[e], acc[r][m]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], off);
  // Every lane holds every sum; lane (r * M + m) % 32 stores D[m, c0 + r].
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (r < rows && lane == (r * M + m) % 32) d[size_t(m) * size_t(C) + c0 + r] = V::store(acc[r][m]);
}

template <typename T, int... Ms>
struct Table {
  static const void* at(int m) {
    static const void* const fns[] = {reinterpret_cast<const void*>(&skinny_gemm_kernel<T, Ms>)...};
    return fns[m - 1];
  }
};
template <typename T>
using AllRows = Table<T, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16>;
static_assert(gemm_choice::kSkinnyMaxRows == 16, "AllRows instantiates M = 1..16");

}  // namespace

cudaError_t run_skinny_gemm(const void* x, const void* w, void* d, int64_t M, int64_t C, int64_t K, int32_t dtype,
                            cudaStream_t stream) {
  if (M < 1 || M > gemm_choice::kSkinnyMaxRows) return cudaErrorInvalidValue;
  const int elem = dtype == FUSEDOPS_F32 ? 4 : 2;
  const void* fn = dtype == FUSEDOPS_F32 ? AllRows<float>::at(int(M))
                   : dtype == FUSEDOPS_BF16 ? AllRows<__nv_bfloat16>::at(int(M))
                                            : AllRows<__half>::at(int(M));
  int c = int(C), nvec = int(K * elem / 16);
  const void* xp = x;
  const void* wp = w;
  void* dp = d;
  void* args[] = {&xp, &wp, &dp, &c, &nvec};
  const dim3 grid(unsigned((C + kChannelsPerBlock - 1) / kChannelsPerBlock));
  return cudaLaunchKernel(fn, grid, dim3(kWarps * 32), args, 0, stream);
}

}  // namespace cuda
}  // namespace fusedops
