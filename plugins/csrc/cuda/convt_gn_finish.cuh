// Internal to convt_gn.cu: the two kernels after the convolution of ConvTransposeGroupNormAct, shared by both
// convolution kernels (convt_gn.cu's mma.sync one and sm90/convt_wgmma.cu): Chan's combine of the tiles' partial
// statistics per (sample, group), and the in-place normalise + `post` pass over Y.
#pragma once

#include "cuda/convt_gn_blocks.cuh"
#include "cuda/convt_normalise.cuh"

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
    if (!tile_holds_group(p, ct, g, tiles_per_group)) continue;  // uniform
    for (int64_t i = threadIdx.x; i < pbs; i += blockDim.x)
      w = welford_combine(w, p.partials[(gi * pbs + i) * p.tiles_c + ct]);
  }
  w = block_welford(w);
  if (threadIdx.x == 0) p.stats[gi] = make_float2(w.mean, rsqrtf(w.m2 / w.n + p.eps));
}

// 16-byte vectors a thread of the normalise pass keeps in flight (convt_normalise.cuh).
constexpr int kNormVecs = 4;

// Y = post((Y - mean) * rstd * gamma + beta), in place. Block b takes chunk (b % chunks) of plane (b / chunks), over
// the blocks from last to first: the convolution wrote the last samples last, and what of them is still in L2 is
// read from there.
template <typename T>
__global__ void __launch_bounds__(kNormThreads) convt_normalize_kernel(const __grid_constant__ ConvtParams p,
                                                                       int64_t chunk_vecs) {
  const int64_t S = int64_t(p.hout) * p.wout;
  const int64_t chunks = ceil_div(convt_plane_vectors<T>(S), chunk_vecs);  // as the plan's grid has them
  const int64_t b = int64_t(gridDim.x) - 1 - blockIdx.x, row = b / chunks;  // row: n * C + c
  const int c = int(row % p.cout);
  const int64_t n = row / p.cout;
  const float2 st = p.stats[n * p.G + c / p.Cg];
  normalise_plane_chunk<T, kNormThreads, kNormVecs>(static_cast<T*>(p.y) + row * S, S, b % chunks, chunk_vecs,
                                                    threadIdx.x, st.x, st.y * load_param(p.gamma, p.param_dtype, c),
                                                    load_param(p.beta, p.param_dtype, c), &p.post, c, &p.ex,
                                                    p.param_dtype);
}

template <typename T>
const void* normalize_kernel() {
  return reinterpret_cast<const void*>(convt_normalize_kernel<T>);
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops
