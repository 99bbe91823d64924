// Internal to convt_gn.cu: the two kernels after the convolution of ConvTransposeGroupNormAct, shared by both
// convolution kernels (convt_gn.cu's mma.sync one and sm90/convt_wgmma.cu): Chan's combine of the tiles' partial
// statistics per (sample, group), and the in-place normalise + `post` pass over Y.
#pragma once

#include "cuda/convt_gn_blocks.cuh"

namespace fusedops {
namespace cuda {
namespace {

// (mean, rstd) of one (sample, group) per block from the partials of every pixel block and channel tile it touches.
__global__ void __launch_bounds__(kNormThreads) convt_finish_kernel(const __grid_constant__ ConvtParams p) {
  const int64_t gi = blockIdx.x;  // n * G + g
  const int g = int(gi % p.G);
  const int64_t pbs = int64_t(p.tiles_h) * p.tiles_w;
  const int tiles_per_group = int(ceil_div(p.cout_g, kTN));
  Welford w{0.f, 0.f, 0.f};
  for (int ct = 0; ct < p.tiles_c; ++ct) {
    const int cg = ct / tiles_per_group, lo = cg * p.cout_g + (ct % tiles_per_group) * kTN;
    const int hi = min(lo + kTN, (cg + 1) * p.cout_g);
    if (hi <= g * p.Cg || lo >= (g + 1) * p.Cg) continue;  // uniform
    for (int64_t i = threadIdx.x; i < pbs; i += blockDim.x)
      w = welford_combine(w, p.partials[(gi * pbs + i) * p.tiles_c + ct]);
  }
  w = block_welford(w);
  if (threadIdx.x == 0) p.stats[gi] = make_float2(w.mean, rsqrtf(w.m2 / w.n + p.eps));
}

// 16-byte vectors a thread of the normalise pass keeps in flight: all loaded before any is used. One at a time (the
// loop's chain call orders each load after the last store) reached about half of the DRAM bandwidth.
constexpr int kNormVecs = 4;

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

// Y = post((Y - mean) * rstd * gamma + beta), in place. Block (row, chunk) takes 16-byte vectors [chunk * chunk_vecs,
// + chunk_vecs) of the (sample, channel) plane `row` from its first 16-byte boundary on, kNormVecs a thread at a time;
// the plane's elements before that boundary and after its last whole vector (fewer than a vector each) go to chunk
// 0's first threads.
template <typename T>
__global__ void __launch_bounds__(kNormThreads) convt_normalize_kernel(const __grid_constant__ ConvtParams p,
                                                                       int64_t chunk_vecs) {
  constexpr int V = 16 / sizeof(T);  // elements a vector
  const int64_t row = blockIdx.x;    // n * C + c
  const int c = int(row % p.cout);
  const int64_t n = row / p.cout;
  const float2 st = p.stats[n * p.G + c / p.Cg];
  const float scale = st.y * load_param(p.gamma, p.param_dtype, c);
  const float b = load_param(p.beta, p.param_dtype, c);
  const int64_t S = int64_t(p.hout) * p.wout;
  T* y = static_cast<T*>(p.y) + row * S;
  const int head = int(min(S, int64_t((16 - reinterpret_cast<uintptr_t>(y) % 16) % 16 / sizeof(T))));
  const int64_t nvec = (S - head) / V;
  if (blockIdx.y == 0) {
    const int64_t tail0 = head + nvec * V;
    const int t = threadIdx.x;
    // head < V: threads [0, head) take the head, threads [V, V + S - tail0) the tail
    const int64_t i = t < head ? t : (t >= V && t - V < S - tail0 ? tail0 + t - V : -1);
    if (i >= 0) {
      float v[1] = {(to_float(y[i]) - st.x) * scale + b};
      apply_chain<1, false>(&p.post, v, c, &p.ex, p.param_dtype);
      y[i] = from_float<T>(v[0]);
    }
  }
  uint4* yv = reinterpret_cast<uint4*>(y + head);
  const int64_t end = min(nvec, (int64_t(blockIdx.y) + 1) * chunk_vecs);
  for (int64_t i0 = int64_t(blockIdx.y) * chunk_vecs + threadIdx.x; i0 < end; i0 += kNormVecs * kNormThreads) {
    uint4 q[kNormVecs];
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u)
      if (i0 + u * kNormThreads < end) q[u] = yv[i0 + u * kNormThreads];
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      if (i0 + u * kNormThreads >= end) break;
      float v[V];
      unpack16<T>(q[u], v);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = (v[j] - st.x) * scale + b;
      apply_chain<V, false>(&p.post, v, c, &p.ex, p.param_dtype);
      yv[i0 + u * kNormThreads] = pack16<T>(v);
    }
  }
}

template <typename T>
const void* normalize_kernel() {
  return reinterpret_cast<const void*>(convt_normalize_kernel<T>);
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops
