// CUTLASS GroupNorm GEMM, bf16 configuration 2: 64x256x64 pingpong, cluster 2x1 (one instantiation a
// file, so builds compile them in parallel; the tile must match gemm_choice.cpp's table, checked at plan time).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY(make_bf16_2, gemm_choice::Mode::BF16, 2, 64, 256, 64, 2, true)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
