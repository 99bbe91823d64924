// The CUDA side of plans in a build without CUDA/cuBLASLt: same symbols, answering FUSEDOPS_ERR_NOT_BUILT, so every
// adapter links and a request for a CUDA plan gets a clear message instead of a missing symbol.
#include "core/message.h"
#include "fusedops/fusedops.h"
#include "plan_backend.h"

namespace fusedops {

struct CudaPlan {};
void CudaPlanDeleter::operator()(CudaPlan* p) const { delete p; }

int cuda_plan_create(const fusedops_op_desc& d, int32_t, const fusedops_plan_options&, CudaPlanPtr*, size_t*,
                     std::string*, char* err, size_t err_len) {
  return core::set_message(err, err_len, FUSEDOPS_ERR_NOT_BUILT,
                           "%s: this fusedops library was built without CUDA (nvcc and cuBLASLt not found when it was "
                           "configured)",
                           d.op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT ? "GemmGroupNormAct" : "GroupNormAct");
}

int cuda_plan_run(const CudaPlan&, const void* const*, int32_t, const void*, void*, void*, size_t, fusedops_stream_t,
                  char* err, size_t err_len) {
  return core::set_message(err, err_len, FUSEDOPS_ERR_NOT_BUILT, "this fusedops library was built without CUDA");
}

size_t cuda_plan_prepared_weights_size(const CudaPlan&) { return 0; }

int cuda_plan_prepare_weights(const CudaPlan&, const void*, void*, fusedops_stream_t, char* err, size_t err_len) {
  return core::set_message(err, err_len, FUSEDOPS_ERR_NOT_BUILT, "this fusedops library was built without CUDA");
}

size_t cuda_workspace_size(const fusedops_op_desc&) { return 0; }

}  // namespace fusedops

extern "C" FUSEDOPS_API int fusedops_has_cuda(void) { return 0; }
