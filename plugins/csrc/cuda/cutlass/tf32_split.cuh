// The 3xTF32 split of one float32 value, shared by the mainloop (X, and W when it splits W itself) and the kernel
// that splits constant weights once (fused_gemm_plan.cu), so both give the same bits.
#pragma once

#include <stdint.h>

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

// x = hi + lo for float32 bits u: hi rounded to TF32 (to nearest, ties away, as cvt.rna.tf32.f32 for finite u; an
// integer add and mask instead of its ~5 instructions), lo = x - hi (exact).
__device__ __forceinline__ uint32_t tf32_hi_bits(uint32_t u) { return (u + 0x1000u) & 0xFFFFE000u; }
__device__ __forceinline__ uint32_t tf32_lo_bits(uint32_t u, uint32_t hi) {
  return __float_as_uint(__uint_as_float(u) - __uint_as_float(hi));
}

// The same for the four values of a 16-byte vector: x becomes its hi part, lo receives the low parts.
__device__ __forceinline__ void tf32_split4(uint4& x, uint4& lo) {
  uint32_t* xs = reinterpret_cast<uint32_t*>(&x);
  uint32_t* ls = reinterpret_cast<uint32_t*>(&lo);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t h = tf32_hi_bits(xs[j]);
    ls[j] = tf32_lo_bits(xs[j], h);
    xs[j] = h;
  }
}

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
