// Exhaustive accuracy of the two float32 GELU forms of the kernels over every float in [-10, 10]:
//   erff form  0.5 x (1 + erff(x / sqrt 2))   (apply_step, PyTorch's CUDA formula)
//   gelu_fast  x - x erfc(|x| / sqrt 2) / 2   (one polynomial + ex2; PRE_GELU_FAST)
//   gelu_fast16  the same with the degree-6 polynomial (16-bit results of the wgmma ConvTranspose epilogue)
// against 0.5 x erfc(-x / sqrt 2) in double. Prints max abs error, max error in float32 ulps of the reference and the
// max |fast - erff|; for gelu_fast16 the max abs error and the max error in bfloat16 / float16 ulps of the reference
// (where it is a normal float16).   nvcc -std=c++17 -O3 -arch=sm_90 -Iplugins/include -Iplugins/csrc tools/gelu_accuracy.cu
#include <stdio.h>
#include <string.h>

#include "cuda/device_common.cuh"

using namespace fusedops::cuda;

// abs err erff, abs err fast, ulp err erff, ulp err fast, |fast - erff|, abs err fast16, bf16 / fp16 ulp err fast16
constexpr int kStats = 8;
__device__ unsigned long long g_max[kStats];

__device__ void atomic_max_pos(int i, double v) {  // non-negative doubles order like their bit patterns
  atomicMax(&g_max[i], static_cast<unsigned long long>(__double_as_longlong(v)));
}

__global__ void sweep(unsigned int top_bits) {
  double m[kStats] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (unsigned int b = blockIdx.x * blockDim.x + threadIdx.x; b <= top_bits; b += gridDim.x * blockDim.x) {
    for (int sign = 0; sign < 2; ++sign) {
      const float x = __uint_as_float(b | (sign ? 0x80000000u : 0u));
      const double ref = 0.5 * double(x) * erfc(-double(x) * 0.70710678118654752440);
      const float old = apply_step(FUSEDOPS_STEP_GELU, x, 0.f, 0.f, 0.f);
      const float fast = gelu_fast(x);
      const float rf = float(ref);
      const double ulp = fmax(double(fabsf(__uint_as_float(__float_as_uint(fabsf(rf)) + 1u) - fabsf(rf))), 1.4e-45);
      m[0] = fmax(m[0], fabs(double(old) - ref));
      m[1] = fmax(m[1], fabs(double(fast) - ref));
      if (x >= -3.f) {  // below, 1 + erff cancels: the erff form has no relative accuracy left, ulps mean nothing
        m[2] = fmax(m[2], fabs(double(old) - ref) / ulp);
        m[3] = fmax(m[3], fabs(double(fast) - ref) / ulp);
      }
      m[4] = fmax(m[4], fabs(double(fast) - double(old)));
      const double e16 = fabs(double(gelu_fast16(x)) - ref);
      m[5] = fmax(m[5], e16);
      if (fabs(ref) >= 6.103515625e-05) {  // a normal float16: ulp = 2^(exponent - 10); bfloat16: 2^(exponent - 7)
        const double ulp16 = ldexp(1.0, ilogb(ref) - 10);
        m[6] = fmax(m[6], e16 / (8.0 * ulp16));
        m[7] = fmax(m[7], e16 / ulp16);
      }
    }
  }
  for (int i = 0; i < kStats; ++i) atomic_max_pos(i, m[i]);
}

int main() {
  const float lim = 10.f;
  unsigned int top;
  memcpy(&top, &lim, 4);
  unsigned long long zero[kStats] = {0, 0, 0, 0, 0, 0, 0, 0};
  cudaMemcpyToSymbol(g_max, zero, sizeof(zero));
  sweep<<<132 * 16, 256>>>(top);
  unsigned long long r[kStats];
  if (cudaMemcpyFromSymbol(r, g_max, sizeof(r)) != cudaSuccess) {
    printf("gelu_accuracy: CUDA error %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  double d[kStats];
  memcpy(d, r, sizeof(d));
  printf("GELU over every float in [-10, 10] vs float64: erff form max abs %.3e (%.2f ulp for x >= -3), gelu_fast max abs %.3e "
         "(%.2f ulp for x >= -3); max |fast - erff| %.3e\n", d[0], d[2], d[1], d[3], d[4]);
  printf("gelu_fast16: max abs %.3e, %.4f bfloat16 ulp, %.4f float16 ulp (of results that are normal float16)\n", d[5],
         d[6], d[7]);
  return 0;
}
