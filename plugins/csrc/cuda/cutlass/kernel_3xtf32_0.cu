// CUTLASS GroupNorm GEMM, 3xtf32 configuration 0: 128x128x32 cooperative, cluster 1x1, W's split signalled by per-
// stage mbarriers (three_tf32_mainloop.cuh; one instantiation a file, so builds compile them in parallel; the tile
// must match gemm_choice.cpp's table, checked at plan time).
#include "cuda/cutlass/fused_kernel.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {
FUSEDOPS_CUTLASS_FACTORY_SCHEDULED(make_three_tf32_0, gemm_choice::Mode::THREE_TF32, 0, 128, 128, 32, 1, false,
                                   ThreeTf32Schedule::kSplitBarriers)
}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
