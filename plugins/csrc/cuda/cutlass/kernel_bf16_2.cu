// CUTLASS GroupNorm GEMM, bf16 configuration 2 of gemm_choice.h's table (one instantiation a file, so builds compile
// them in parallel).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY(make_bf16_2, gemm_choice::Mode::BF16, 2)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
