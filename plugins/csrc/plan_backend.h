// Internal: what plan.cpp needs from the CUDA side of a build (plugins/csrc/cuda/cuda_plan.cu, or the stubs of a
// build without CUDA in plugins/csrc/no_cuda_stubs.cpp). Not part of the ABI.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>

#include "fusedops/fusedops.h"

namespace fusedops {

struct CudaPlan;
struct CudaPlanDeleter {
  void operator()(CudaPlan* p) const;
};
using CudaPlanPtr = std::unique_ptr<CudaPlan, CudaPlanDeleter>;

// The CUDA part of a plan on `device` (made current while planning, then restored). `d` is complete and checked.
int cuda_plan_create(const fusedops_op_desc& d, int32_t device, const fusedops_plan_options& options, CudaPlanPtr* out,
                     size_t* workspace, std::string* kernels, char* err, size_t err_len);

// Enqueues one run; inputs in node order, already checked for count and required pointers.
int cuda_plan_run(const CudaPlan& plan, const void* const* inputs, int32_t num_inputs, void* y, void* workspace,
                  size_t workspace_size, fusedops_stream_t stream, char* err, size_t err_len);

// Workspace of a production plan of `d` (complete and checked), on any device.
size_t cuda_workspace_size(const fusedops_op_desc& d);

}  // namespace fusedops
