// Kernel stand-ins for libfusedops_trt_wsmodel.so, a plugin build for CPU tests of the workspace logic: the CUDA
// entries refuse like the no-CUDA stubs, but the workspace sizes follow the CUDA GroupNorm planner's split rule
// (plugins/csrc/cuda/groupnorm_act.cu, plan_groupnorm), so the need is non-zero and, like the real one, not monotone
// in the batch: few groups are split into more chunks to fill the GPU.
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "fusedops/fusedops.h"

namespace {
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kChunkMax = 16384;
constexpr int64_t kChunkMin = 2048;
constexpr size_t kAlign = 256;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

size_t groupNormNeed(fusedops_groupnorm_desc const& d) {
  int64_t const groups = d.N * d.num_groups;
  int64_t const len = d.C / d.num_groups * d.S;
  int64_t chunks = ceilDiv(len, kChunkMax);
  if (groups * chunks < kTargetBlocks)
    chunks = std::max(chunks, std::min(ceilDiv(len, kChunkMin), ceilDiv(kTargetBlocks, groups)));
  if (chunks <= 1 && d.reduce == FUSEDOPS_REDUCE_NONE) return 0;  // one fused pass, no partial statistics
  return static_cast<size_t>(groups * chunks) * 16 + kAlign;
}

int notBuilt(char const* op, char* err, size_t errLen) {
  if (err && errLen > 0) std::snprintf(err, errLen, "%s: workspace-model build, no CUDA kernels", op);
  return FUSEDOPS_ERR_NOT_BUILT;
}
}  // namespace

extern "C" {

FUSEDOPS_API int fusedops_has_cuda(void) { return 0; }

FUSEDOPS_API size_t fusedops_groupnorm_act_workspace_size(const fusedops_groupnorm_desc* d) {
  if (!d || fusedops_groupnorm_act_check(d, nullptr, 0) != FUSEDOPS_OK) return 0;
  return groupNormNeed(*d);
}

FUSEDOPS_API size_t fusedops_gemm_groupnorm_act_workspace_size(const fusedops_gemm_desc* d) {
  if (!d || fusedops_gemm_groupnorm_act_check(d, nullptr, 0) != FUSEDOPS_OK) return 0;
  return kAlign + static_cast<size_t>(d->gn.N * d->gn.C) * 4 + groupNormNeed(d->gn);
}

FUSEDOPS_API int fusedops_groupnorm_act_cuda(const fusedops_groupnorm_desc*, const void*, const void*, const void*,
                                             const void* const*, int32_t, void*, void*, size_t, fusedops_stream_t,
                                             char* err, size_t err_len) {
  return notBuilt("GroupNormAct", err, err_len);
}

FUSEDOPS_API int fusedops_gemm_groupnorm_act_cuda(const fusedops_gemm_desc*, const void*, const void*, const void*,
                                                  const void*, const void*, const void* const*, int32_t, void*, void*,
                                                  size_t, fusedops_stream_t, char* err, size_t err_len) {
  return notBuilt("GemmGroupNormAct", err, err_len);
}

}  // extern "C"
