// CUTLASS GroupNorm GEMM, tf32 configuration 2: 64x256x32 pingpong, cluster 2x1 (one instantiation a
// file, so builds compile them in parallel; the tile must match gemm_choice.cpp's table, checked at plan time).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY(make_tf32_2, gemm_choice::Mode::TF32, 2, 64, 256, 32, 2, true)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
