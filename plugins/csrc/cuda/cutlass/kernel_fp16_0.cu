// CUTLASS GroupNorm GEMM, fp16 configuration 0: 128x256x64 cooperative, cluster 2x1 (one instantiation a
// file, so builds compile them in parallel; the tile must match gemm_choice.cpp's table, checked at plan time).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY(make_fp16_0, gemm_choice::Mode::FP16, 0, 128, 256, 64, 2, false)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
