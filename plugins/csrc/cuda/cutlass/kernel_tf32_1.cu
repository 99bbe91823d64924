// CUTLASS GroupNorm GEMM, tf32 configuration 1: 128x256x32 cooperative, cluster 1x1 (one instantiation a
// file, so builds compile them in parallel; the tile must match gemm_choice.cpp's table, checked at plan time).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY(make_tf32_1, gemm_choice::Mode::TF32, 1, 128, 256, 32, 1, false)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
