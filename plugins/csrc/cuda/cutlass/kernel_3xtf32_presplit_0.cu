// CUTLASS GroupNorm GEMM, 3xTF32 on weights split once: row 0 of gemm_choice.h's kThreeTf32PresplitConfigs (one
// instantiation a file, so builds compile them in parallel).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_PRESPLIT_FACTORY(make_three_tf32_presplit_0, 0)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
