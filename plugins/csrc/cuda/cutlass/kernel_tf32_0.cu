// CUTLASS GroupNorm GEMM, tf32 configuration 0: 128x256x32 cooperative, cluster 2x1 (one instantiation a
// file, so builds compile them in parallel; the tile must match gemm_choice.cpp's table, checked at plan time).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY(make_tf32_0, gemm_choice::Mode::TF32, 0, 128, 256, 32, 2, false)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
