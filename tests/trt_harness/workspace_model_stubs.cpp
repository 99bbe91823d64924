// The CUDA side of plans for libfusedops_trt_wsmodel.so, a plugin build for CPU tests of the workspace logic: plans
// refuse like a build without CUDA, but the workspace sizes follow the CUDA GroupNorm planner's split rule
// (plugins/csrc/cuda/gn_plan.cu, plan_groupnorm), so the need is non-zero and, like the real one, not monotone in
// the batch: few groups are split into more chunks to fill the GPU.
#include <algorithm>
#include <cstdint>

#include "core/message.h"
#include "fusedops/fusedops.h"
#include "plan_backend.h"

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
}  // namespace

namespace fusedops {

struct CudaPlan {};
void CudaPlanDeleter::operator()(CudaPlan* p) const { delete p; }

int cuda_plan_create(const fusedops_op_desc&, int32_t, const fusedops_plan_options&, CudaPlanPtr*, size_t*,
                     std::string*, char* err, size_t err_len) {
  return core::set_message(err, err_len, FUSEDOPS_ERR_NOT_BUILT, "workspace-model build, no CUDA kernels");
}

int cuda_plan_run(const CudaPlan&, const void* const*, int32_t, const void*, void*, void*, size_t, fusedops_stream_t,
                  char* err, size_t err_len) {
  return core::set_message(err, err_len, FUSEDOPS_ERR_NOT_BUILT, "workspace-model build, no CUDA kernels");
}

size_t cuda_plan_prepared_weights_size(const CudaPlan&) { return 0; }

int cuda_plan_prepare_weights(const CudaPlan&, const void*, void*, fusedops_stream_t, char* err, size_t err_len) {
  return core::set_message(err, err_len, FUSEDOPS_ERR_NOT_BUILT, "workspace-model build, no CUDA kernels");
}

size_t cuda_workspace_size(const fusedops_op_desc& d) {
  if (d.op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT) return groupNormNeed(d.d.gn);
  return kAlign + static_cast<size_t>(d.d.gn.N * d.d.gn.C) * 4 + groupNormNeed(d.d.gn);
}

}  // namespace fusedops

extern "C" FUSEDOPS_API int fusedops_has_cuda(void) { return 0; }
