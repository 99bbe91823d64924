// CUTLASS GroupNorm GEMM, bf16 configuration 1: 128x256x64 cooperative, cluster 1x1 (one instantiation a
// file, so builds compile them in parallel; the tile must match gemm_choice.cpp's table, checked at plan time).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY(make_bf16_1, gemm_choice::Mode::BF16, 1, 128, 256, 64, 1, false)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
