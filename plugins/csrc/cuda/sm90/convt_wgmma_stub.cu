// A build without sm_90 (FUSEDOPS_CUDA_ARCHS lacks 90): the wgmma kernel is absent and plans keep the mma.sync one.
#include "cuda/sm90/convt_wgmma.h"

namespace fusedops {
namespace cuda {

int convt_sm90_built() { return 0; }
size_t convt_sm90_smem(int32_t, int32_t, bool, size_t, size_t, int32_t*, int32_t*) { return 0; }
cudaError_t convt_sm90_prepare(size_t) { return cudaErrorNotSupported; }
int32_t convt_sm90_pre_kind(const fusedops_chain&) { return -1; }
cudaError_t convt_sm90_pack(const void*, void*, int32_t, int32_t, int32_t, int32_t, bool, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t convt_sm90_conv(const ConvtSm90Params&, size_t, cudaStream_t) { return cudaErrorNotSupported; }

}  // namespace cuda
}  // namespace fusedops
