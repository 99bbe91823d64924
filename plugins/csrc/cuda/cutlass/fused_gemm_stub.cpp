// The CUTLASS plan entry points of a build without the CUTLASS kernels (no headers, or no sm_90 in the target
// architectures): gemm_choice sees fusedops_has_cutlass() == 0 and never picks them, so these only answer errors.
#include "core/message.h"
#include "cuda/cutlass/fused_gemm_plan.h"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

struct FusedGemmPlan {};
void FusedGemmPlanDeleter::operator()(FusedGemmPlan* p) const { delete p; }

int make_fused_gemm_plan(const fusedops_op_desc&, const gemm_choice::Choice&, int, int, FusedGemmPlanPtr*, size_t*,
                         std::string*, char* err, size_t err_len) {
  return core::set_message(err, err_len, FUSEDOPS_ERR_NOT_BUILT,
                           "GemmGroupNormAct: this library was built without the CUTLASS kernels");
}

bool fused_gemm_accepts(const FusedGemmPlan&, const void*, const void*, const void*) { return false; }

size_t fused_gemm_prepared_bytes(const FusedGemmPlan&) { return 0; }

cudaError_t prepare_fused_gemm_weights(const FusedGemmPlan&, const void*, void*, cudaStream_t) {
  return cudaErrorNotSupported;
}

cudaError_t run_fused_gemm(const FusedGemmPlan&, const void* const*, int32_t, const void*, void*, void*,
                           cudaStream_t) {
  return cudaErrorNotSupported;
}

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
