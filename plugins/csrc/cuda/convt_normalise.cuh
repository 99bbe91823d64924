// Internal to the ConvTranspose kernels: the in-place normalise of one chunk of one Y plane, shared by the separate
// normalise kernel (convt_gn_finish.cuh) and the wgmma kernel's normaliser blocks (sm90/convt_wgmma_normalise.cuh).
#pragma once

#include "cuda/device_common.cuh"

namespace fusedops {
namespace cuda {

// One 16-byte vector of Y: the 16 / sizeof(T) values as float32, and back.
template <typename T>
__device__ __forceinline__ void unpack16(uint4 q, float (&v)[16 / sizeof(T)]) {
  union { uint4 u; T h[16 / sizeof(T)]; } pk;
  pk.u = q;
#pragma unroll
  for (int j = 0; j < int(16 / sizeof(T)); ++j) v[j] = to_float(pk.h[j]);
}
template <typename T>
__device__ __forceinline__ uint4 pack16(const float (&v)[16 / sizeof(T)]) {
  union { uint4 u; T h[16 / sizeof(T)]; } pk;
#pragma unroll
  for (int j = 0; j < int(16 / sizeof(T)); ++j) pk.h[j] = from_float<T>(v[j]);
  return pk.u;
}

// 16-byte vectors of a plane of S elements (from its first 16-byte boundary; at most one more than the whole ones).
template <typename T>
__host__ __device__ inline int64_t convt_plane_vectors(int64_t S) {
  return (S * int64_t(sizeof(T)) + 15) / 16;
}

// Elements of the plane y (S of them) before its first 16-byte boundary (fewer than a vector; all S if it is shorter).
template <typename T>
__device__ __forceinline__ int plane_head(const T* y, int64_t S) {
  return int(min(S, int64_t((16 - reinterpret_cast<uintptr_t>(y) % 16) % 16 / sizeof(T))));
}

// The normalise of one value or one 16-byte vector: post((v - mean) * scale + shift).
template <typename T>
__device__ __forceinline__ void normalise_scalar(T* y, float mean, float scale, float shift,
                                                 const fusedops_chain* post, int c, const ExtraPtrs* ex,
                                                 int32_t param_dtype) {
  float v[1] = {(to_float(*y) - mean) * scale + shift};
  apply_chain<1, false>(post, v, c, ex, param_dtype);
  *y = from_float<T>(v[0]);
}
template <typename T>
__device__ __forceinline__ uint4 normalise_vector(uint4 q, float mean, float scale, float shift,
                                                  const fusedops_chain* post, int c, const ExtraPtrs* ex,
                                                  int32_t param_dtype) {
  constexpr int V = 16 / sizeof(T);
  float v[V];
  unpack16<T>(q, v);
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = (v[j] - mean) * scale + shift;
  apply_chain<V, false>(post, v, c, ex, param_dtype);
  return pack16<T>(v);
}

// The plane's elements outside its whole 16-byte vectors, one a thread: threads [0, head) the head, threads
// [V, V + the tail's length) the tail after the nvec vectors (V = a vector's elements; needs 2 V threads).
template <typename T>
__device__ __forceinline__ void normalise_plane_ends(T* y, int64_t S, int head, int64_t nvec, int t, float mean,
                                                     float scale, float shift, const fusedops_chain* post, int c,
                                                     const ExtraPtrs* ex, int32_t param_dtype) {
  constexpr int V = 16 / sizeof(T);
  const int64_t tail0 = head + nvec * V;
  const int64_t i = t < head ? t : (t >= V && t - V < S - tail0 ? tail0 + t - V : -1);
  if (i >= 0) normalise_scalar(y + i, mean, scale, shift, post, c, ex, param_dtype);
}

// Y = post((Y - mean) * scale + shift) over chunk `chunk` of the plane y (S elements): its 16-byte vectors
// [chunk * chunk_vecs, + chunk_vecs) counted from the plane's first 16-byte boundary, kVecs a thread loaded before any
// is used (one at a time reached about half of the DRAM bandwidth); chunk 0 also takes the elements before that
// boundary and after the last whole vector. kThreads threads, thread `t`. Loads bypass L1 (ld.global.cg).
template <typename T, int kThreads, int kVecs>
__device__ __forceinline__ void normalise_plane_chunk(T* y, int64_t S, int64_t chunk, int64_t chunk_vecs, int t,
                                                      float mean, float scale, float shift,
                                                      const fusedops_chain* post, int c, const ExtraPtrs* ex,
                                                      int32_t param_dtype) {
  constexpr int V = 16 / sizeof(T);  // elements a vector
  static_assert(kThreads >= 2 * V, "the head and the tail take a thread an element");
  const int head = plane_head(y, S);
  const int64_t nvec = (S - head) / V;
  if (chunk == 0) normalise_plane_ends(y, S, head, nvec, t, mean, scale, shift, post, c, ex, param_dtype);
  uint4* yv = reinterpret_cast<uint4*>(y + head);
  const int64_t end = min(nvec, (chunk + 1) * chunk_vecs);
  for (int64_t i0 = chunk * chunk_vecs + t; i0 < end; i0 += kVecs * kThreads) {
    uint4 q[kVecs];
#pragma unroll
    for (int u = 0; u < kVecs; ++u)
      if (i0 + u * kThreads < end) q[u] = __ldcg(yv + i0 + u * kThreads);
#pragma unroll
    for (int u = 0; u < kVecs; ++u) {
      if (i0 + u * kThreads >= end) break;
      yv[i0 + u * kThreads] = normalise_vector<T>(q[u], mean, scale, shift, post, c, ex, param_dtype);
    }
  }
}

}  // namespace cuda
}  // namespace fusedops
