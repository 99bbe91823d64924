// Internal host API of the GroupNorm(+chains, +channel reduction) kernels, shared by GroupNormAct and by the
// epilogue of GemmGroupNormAct (which runs the same kernels on the GEMM output, with an optional per-channel bias).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "fusedops/fusedops.h"

namespace fusedops {
namespace cuda {

// How a (N, C, S) GroupNorm is split into launches. Depends only on shapes and dtype (never on pointers or the
// device), so the workspace size query and the run agree.
struct GnPlan {
  enum Kind { ROW, FUSED, SPLIT, SPLIT_REDUCE } kind;
  int64_t group_len = 0;    // L = C/G * S elements per (sample, group)
  int64_t chunk = 0;        // elements per block of the split kernels (multiple of 8)
  int64_t chunks = 1;       // P: blocks per group
  size_t smem_bytes = 0;    // ROW: dynamic shared memory
  size_t workspace = 0;     // bytes (plus 256 for alignment of the caller's pointer)
  // SPLIT may instead run the one-pass kernel (X read once, its chunk kept in shared memory) when the device keeps
  // enough blocks resident; decided at launch, so the workspace covers both.
  int64_t onepass_chunk = 0;   // elements per block (0: not eligible)
  int64_t onepass_chunks = 0;  // blocks per group
};
GnPlan plan_groupnorm(const fusedops_groupnorm_desc& d);

struct GnLaunch {
  const fusedops_groupnorm_desc* d;
  const void* x;       // (N, C, S) in d->x_dtype
  const void* bias;    // optional, C elements in d->param_dtype, added before `pre` (GEMM bias not fused by cuBLASLt)
  const void* gamma;
  const void* beta;
  const void* const* extras;
  int32_t num_extras;
  void* y;
  void* workspace;
  size_t workspace_size;
  cudaStream_t stream;
};
// Enqueues the kernels; returns the launch error (cudaSuccess when all launches were accepted).
cudaError_t launch_groupnorm(const GnLaunch& a);

// FUSEDOPS_UNSUPPORTED when the shape exceeds the kernels' 32-bit grid/index limits.
int check_cuda_limits(const fusedops_groupnorm_desc& d, const char* op, char* err, size_t err_len);

// Writes a message into err (if any) and returns code.
int set_error(char* err, size_t err_len, int code, const char* fmt, ...);

}  // namespace cuda
}  // namespace fusedops
