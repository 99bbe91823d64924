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

// Y = post((Y - mean) * scale + shift) over chunk `chunk` of the plane y (S elements): its 16-byte vectors
// [chunk * chunk_vecs, + chunk_vecs) counted from the plane's first 16-byte boundary, kVecs a thread loaded before any
// is used (one at a time reached about half of the DRAM bandwidth); chunk 0 also takes the elements before that
// boundary and after the last whole vector (fewer than a vector each) one by one. kThreads threads, thread `t`.
// Loads bypass L1 (ld.global.cg): other SMs wrote Y in this launch (the wgmma kernel's normaliser blocks).
// kInlineChain: `post` through the inlined interpreter (a kernel that moves registers with setmaxnreg cannot call the
// out-of-line one: ptxas compiles a callee for one register count), else through the out-of-line one.
template <typename T, int kThreads, int kVecs, bool kInlineChain = false>
__device__ __forceinline__ void normalise_plane_chunk(T* y, int64_t S, int64_t chunk, int64_t chunk_vecs, int t,
                                                      float mean, float scale, float shift,
                                                      const fusedops_chain* post, int c, const ExtraPtrs* ex,
                                                      int32_t param_dtype) {
  constexpr int V = 16 / sizeof(T);  // elements a vector
  static_assert(kThreads >= 2 * V, "the head and the tail take a thread an element");
  const int head = int(min(S, int64_t((16 - reinterpret_cast<uintptr_t>(y) % 16) % 16 / sizeof(T))));
  const int64_t nvec = (S - head) / V;
  if (chunk == 0) {
    const int64_t tail0 = head + nvec * V;
    // head < V: threads [0, head) take the head, threads [V, V + S - tail0) the tail
    const int64_t i = t < head ? t : (t >= V && t - V < S - tail0 ? tail0 + t - V : -1);
    if (i >= 0) {
      float v[1] = {(to_float(y[i]) - mean) * scale + shift};
      if constexpr (kInlineChain) apply_chain_inline<1, false>(*post, v, c, *ex, param_dtype);
      else apply_chain<1, false>(post, v, c, ex, param_dtype);
      y[i] = from_float<T>(v[0]);
    }
  }
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
      float v[V];
      unpack16<T>(q[u], v);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = (v[j] - mean) * scale + shift;
      if constexpr (kInlineChain) apply_chain_inline<V, false>(*post, v, c, *ex, param_dtype);
      else apply_chain<V, false>(post, v, c, ex, param_dtype);
      yv[i0 + u * kThreads] = pack16<T>(v);
    }
  }
}

}  // namespace cuda
}  // namespace fusedops
