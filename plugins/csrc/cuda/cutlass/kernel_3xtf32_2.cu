// CUTLASS GroupNorm GEMM, 3xtf32 configuration 2 of gemm_choice.h's table (one instantiation a file, so builds compile
// them in parallel).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY(make_three_tf32_2, gemm_choice::Mode::THREE_TF32, 2)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
