// Host API of the GroupNorm(+chains, +channel reduction) kernels, shared by GroupNormAct and by the epilogue of
// GemmGroupNormAct (the same kernels on the GEMM output, with an optional per-channel bias).
//
// Two levels: GnPlan is the shape-only split (no device, no pointers: the workspace-size query and every plan agree);
// GnLaunchPlan resolves every launch for one device once (kernel instantiation, grid, block, shared memory, the
// occupancy-based choices, kernel attributes), with one variant per pointer alignment class, so a run only fills
// in pointers and enqueues.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>

#include "fusedops/fusedops.h"

namespace fusedops {
namespace cuda {

struct GnPlan {
  enum Kind { ROW, FUSED, SPLIT, SPLIT_REDUCE } kind;
  int64_t group_len = 0;    // L = C/G * S elements per (sample, group)
  int64_t chunk = 0;        // elements per block of the split kernels (multiple of 8)
  int64_t chunks = 1;       // P: blocks per group
  size_t smem_bytes = 0;    // ROW: dynamic shared memory
  size_t workspace = 0;     // bytes (plus 256 for alignment of the caller's pointer)
  // SPLIT may instead run the one-pass kernel (X read once, its chunk kept in shared memory) when the device keeps
  // enough blocks resident; decided by the launch plan, so the workspace covers both.
  int64_t onepass_chunk = 0;   // elements per block (0: not eligible)
  int64_t onepass_chunks = 0;  // blocks per group
};
GnPlan plan_groupnorm(const fusedops_groupnorm_desc& d);

// Everything a run passes: device pointers of this call. bias (C elements, param dtype) is added before `pre`
// (the GEMM bias when cuBLASLt did not add it); null when absent.
struct GnPointers {
  const void* x;
  const void* bias;
  const void* gamma;
  const void* beta;
  const void* extras[FUSEDOPS_MAX_EXTRAS];
  void* y;
  void* workspace;  // at least plan_groupnorm(d).workspace bytes, any alignment
};

struct GnLaunchPlan;
struct GnLaunchPlanDeleter {
  void operator()(GnLaunchPlan* p) const;
};
using GnLaunchPlanPtr = std::unique_ptr<GnLaunchPlan, GnLaunchPlanDeleter>;

// Resolves the launches on the current device. `kernels` receives a short description of the chosen kernels.
// Returns FUSEDOPS_OK or an error code with a message.
int make_gn_launch_plan(const fusedops_groupnorm_desc& d, const fusedops_plan_options& options, GnLaunchPlanPtr* out,
                        std::string* kernels, char* err, size_t err_len);

// Enqueues the planned kernels (the variant the pointers' alignment allows). No allocation, query or attribute
// change: capturable in a CUDA graph.
cudaError_t run_gn(const GnLaunchPlan& plan, const GnPointers& ptrs, cudaStream_t stream);

// FUSEDOPS_ERR_UNSUPPORTED when the shape exceeds the kernels' 32-bit grid/index limits.
int check_cuda_limits(const fusedops_groupnorm_desc& d, const char* op, char* err, size_t err_len);

}  // namespace cuda
}  // namespace fusedops
