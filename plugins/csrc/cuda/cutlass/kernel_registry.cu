// The CUTLASS instantiations by (mode, configuration), in the order of gemm_choice.cpp's tables. Each factory is
// defined in its own kernel_<mode>_<config>.cu.
#include "cuda/cutlass/fused_kernel.h"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

#define FUSEDOPS_DECLARE(NAME)                                                                                  \
  int NAME(const GemmShape& s, const GnEpilogueParams& epi, int device, int sm_count, FusedKernelPtr* out, \
           char* err, size_t err_len);
FUSEDOPS_DECLARE(make_tf32_0)
FUSEDOPS_DECLARE(make_tf32_1)
FUSEDOPS_DECLARE(make_tf32_2)
FUSEDOPS_DECLARE(make_bf16_0)
FUSEDOPS_DECLARE(make_bf16_1)
FUSEDOPS_DECLARE(make_bf16_2)
FUSEDOPS_DECLARE(make_fp16_0)
FUSEDOPS_DECLARE(make_three_tf32_0)
FUSEDOPS_DECLARE(make_three_tf32_1)
#undef FUSEDOPS_DECLARE

FusedKernelFactory factory(gemm_choice::Mode mode, int config) {
  static const FusedKernelFactory tf32[] = {make_tf32_0, make_tf32_1, make_tf32_2};
  static const FusedKernelFactory bf16[] = {make_bf16_0, make_bf16_1, make_bf16_2};
  static const FusedKernelFactory fp16[] = {make_fp16_0};
  static const FusedKernelFactory three[] = {make_three_tf32_0, make_three_tf32_1};
  const FusedKernelFactory* table = tf32;
  int n = 3;
  switch (mode) {
    case gemm_choice::Mode::TF32: break;
    case gemm_choice::Mode::BF16: table = bf16, n = 3; break;
    case gemm_choice::Mode::FP16: table = fp16, n = 1; break;
    default: table = three, n = 2; break;
  }
  return config >= 0 && config < n ? table[config] : nullptr;
}

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
