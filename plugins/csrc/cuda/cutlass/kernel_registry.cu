// The CUTLASS instantiations by (mode, configuration), in the order of gemm_choice.h's tables, and the 3xTF32 kernel
// on presplit weights. Each factory is defined in its own kernel_<mode>_<config>.cu.
#include <iterator>

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
FUSEDOPS_DECLARE(make_three_tf32_2)
FUSEDOPS_DECLARE(make_three_tf32_presplit_0)
FUSEDOPS_DECLARE(make_three_tf32_presplit_1)
#undef FUSEDOPS_DECLARE

FusedKernelFactory factory(gemm_choice::Mode mode, int config) {
  using gemm_choice::Mode;
  static constexpr FusedKernelFactory tf32[] = {make_tf32_0, make_tf32_1, make_tf32_2};
  static constexpr FusedKernelFactory bf16[] = {make_bf16_0, make_bf16_1, make_bf16_2};
  static constexpr FusedKernelFactory fp16[] = {make_fp16_0};
  static constexpr FusedKernelFactory three[] = {make_three_tf32_0, make_three_tf32_1, make_three_tf32_2};
  static_assert(std::size(tf32) == gemm_choice::config_count(Mode::TF32) &&
                    std::size(bf16) == gemm_choice::config_count(Mode::BF16) &&
                    std::size(fp16) == gemm_choice::config_count(Mode::FP16) &&
                    std::size(three) == gemm_choice::config_count(Mode::THREE_TF32),
                "one factory (kernel_<mode>_<n>.cu) for every row of gemm_choice.h's tables");
  const FusedKernelFactory* table = mode == Mode::TF32 ? tf32 : mode == Mode::BF16 ? bf16 : mode == Mode::FP16 ? fp16
                                                                                                              : three;
  return config >= 0 && config < gemm_choice::config_count(mode) ? table[config] : nullptr;
}

FusedKernelFactory presplit_factory(int row) {
  static constexpr FusedKernelFactory presplit[] = {make_three_tf32_presplit_0, make_three_tf32_presplit_1};
  static_assert(std::size(presplit) == std::size(gemm_choice::kThreeTf32PresplitConfigs),
                "one factory (kernel_3xtf32_presplit_<n>.cu) for every row of kThreeTf32PresplitConfigs");
  return row >= 0 && row < int(std::size(presplit)) ? presplit[row] : nullptr;
}

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
