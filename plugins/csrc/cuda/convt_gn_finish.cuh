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

// Y = post((Y - mean) * rstd * gamma + beta), in place, one (sample, channel) row chunk per block.
template <typename T>
__global__ void __launch_bounds__(kNormThreads) convt_normalize_kernel(const __grid_constant__ ConvtParams p,
                                                                       int64_t chunk) {
  const int64_t row = blockIdx.x;  // n * C + c
  const int c = int(row % p.cout);
  const int64_t n = row / p.cout;
  const float2 st = p.stats[n * p.G + c / p.Cg];
  const float scale = st.y * load_param(p.gamma, p.param_dtype, c);
  const float b = load_param(p.beta, p.param_dtype, c);
  const int64_t S = int64_t(p.hout) * p.wout;
  T* y = static_cast<T*>(p.y) + row * S;
  const int64_t begin = int64_t(blockIdx.y) * chunk, end = min(S, begin + chunk);
  if (reinterpret_cast<uintptr_t>(y) % (4 * sizeof(T)) == 0) {  // chunk % 4 == 0: vector loads and stores
    for (int64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * blockDim.x) {
      float v[4];
      const int valid = end - i < 4 ? int(end - i) : 4;
      load4(y + i, v, valid);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = (v[j] - st.x) * scale + b;
      apply_chain<4, false>(&p.post, v, c, &p.ex, p.param_dtype);
      store4(y + i, v, valid);
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float v[1] = {(to_float(y[i]) - st.x) * scale + b};
    apply_chain<1, false>(&p.post, v, c, &p.ex, p.param_dtype);
    y[i] = from_float<T>(v[0]);
  }
}

template <typename T>
const void* normalize_kernel() {
  return reinterpret_cast<const void*>(convt_normalize_kernel<T>);
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops
