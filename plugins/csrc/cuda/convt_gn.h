// Internal: ConvTransposeGroupNormAct on CUDA (convt_gn.cu), what cuda_plan.cu needs. Not part of the ABI.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>

#include "fusedops/fusedops.h"

namespace fusedops {
namespace cuda {

struct ConvtLaunch;
struct ConvtLaunchDeleter {
  void operator()(ConvtLaunch* p) const;
};
using ConvtLaunchPtr = std::unique_ptr<ConvtLaunch, ConvtLaunchDeleter>;

// Everything a run needs, decided once: tiles, grids, shared memory (and its kernel attribute), workspace layout.
// `d` is complete and checked (plan.cpp); the device is current. Refuses what the kernels do not take yet (a channel
// reduction, channels-last tensors, devices before sm_80) with FUSEDOPS_ERR_UNSUPPORTED and the reason.
int convt_plan(const fusedops_op_desc& d, const fusedops_plan_options& o, ConvtLaunchPtr* out, size_t* workspace,
               std::string* kernels, char* err, size_t err_len);

// Enqueues one run: inputs X, W, B (may be NULL), gamma, beta, extras...; workspace of at least the plan's size.
cudaError_t convt_run(const ConvtLaunch& plan, const void* const* inputs, int32_t num_inputs, void* y,
                      void* workspace, cudaStream_t stream);

// Workspace a plan of `d` needs (a pure function of the descriptor).
size_t convt_workspace_size(const fusedops_op_desc& d);

}  // namespace cuda
}  // namespace fusedops
