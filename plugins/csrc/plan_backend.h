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

// Enqueues one run; inputs in node order, already checked for count and required pointers. `prepared` (or null): W's
// prepared form (cuda_plan_prepare_weights), already checked for alignment.
int cuda_plan_run(const CudaPlan& plan, const void* const* inputs, int32_t num_inputs, const void* prepared, void* y,
                  void* workspace, size_t workspace_size, fusedops_stream_t stream, char* err, size_t err_len);

// Bytes of W's prepared form the plan can take (0: none).
size_t cuda_plan_prepared_weights_size(const CudaPlan& plan);
// Enqueues the writing of W's prepared form; `prepared` is checked (size, alignment) by the caller.
int cuda_plan_prepare_weights(const CudaPlan& plan, const void* w, void* prepared, fusedops_stream_t stream, char* err,
                              size_t err_len);

// Workspace of a production plan of `d` (complete and checked), on any device.
size_t cuda_workspace_size(const fusedops_op_desc& d);

}  // namespace fusedops
