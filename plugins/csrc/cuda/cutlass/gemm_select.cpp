// plan_if_chosen (fused_gemm_plan.h): the device traits, the planner's choice and, for CUTLASS, its plan. Host code
// of every CUDA build (with or without the CUTLASS kernels).
#include <cuda_runtime.h>

#include <algorithm>

#include "core/message.h"
#include "cuda/cutlass/fused_gemm_plan.h"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

int plan_if_chosen(const fusedops_op_desc& d, const fusedops_plan_options& o, int device, FusedGemmPlanPtr* out,
                   size_t* workspace, std::string* kernels, int32_t* chosen, char* err, size_t err_len) {
  fusedops_gemm_device dev{};
  if (cudaDeviceGetAttribute(&dev.cc_major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&dev.cc_minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&dev.sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return core::set_message(err, err_len, FUSEDOPS_ERR_CUDA, "GemmGroupNormAct: device %d attributes: %s", device,
                             cudaGetErrorString(e));
  }
  dev.has_cutlass = fusedops_has_cutlass();
  gemm_choice::Choice choice;
  int rc = gemm_choice::choose(d, dev, o, &choice, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  *chosen = choice.kernel;  // the rule is the production choice (gemm_choice.cpp: its switches included)
  if (choice.kernel != FUSEDOPS_GEMM_CUTLASS) return FUSEDOPS_OK;
  size_t bytes = 0;
  std::string text;
  rc = make_fused_gemm_plan(d, choice, device, dev.sm_count, out, &bytes, &text, err, err_len);
  if (rc != FUSEDOPS_OK) return rc;
  *workspace = std::max(*workspace, bytes);
  *kernels = text + " [misaligned pointers: " + *kernels + "]";
  return FUSEDOPS_OK;
}

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
