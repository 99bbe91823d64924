// The CUDA entries of a build without CUDA/cuBLASLt: same symbols, answering FUSEDOPS_ERR_NOT_BUILT, so every adapter
// links and callers get a clear message instead of a missing symbol.
#include <cstdio>

#include "fusedops/fusedops.h"

namespace {
int not_built(const char* op, char* err, size_t err_len) {
  if (err && err_len > 0)
    std::snprintf(err, err_len, "%s: this fusedops library was built without CUDA (nvcc and cuBLASLt not found "
                  "when it was configured)", op);
  return FUSEDOPS_ERR_NOT_BUILT;
}
}  // namespace

extern "C" {

FUSEDOPS_API int fusedops_has_cuda(void) { return 0; }

FUSEDOPS_API size_t fusedops_groupnorm_act_workspace_size(const fusedops_groupnorm_desc*) { return 0; }
FUSEDOPS_API size_t fusedops_gemm_groupnorm_act_workspace_size(const fusedops_gemm_desc*) { return 0; }

FUSEDOPS_API int fusedops_groupnorm_act_cuda(const fusedops_groupnorm_desc*, const void*, const void*, const void*,
                                             const void* const*, int32_t, void*, void*, size_t, fusedops_stream_t,
                                             char* err, size_t err_len) {
  return not_built("GroupNormAct", err, err_len);
}

FUSEDOPS_API int fusedops_gemm_groupnorm_act_cuda(const fusedops_gemm_desc*, const void*, const void*, const void*,
                                                  const void*, const void*, const void* const*, int32_t, void*, void*,
                                                  size_t, fusedops_stream_t, char* err, size_t err_len) {
  return not_built("GemmGroupNormAct", err, err_len);
}

}  // extern "C"
