// Internal interface between the CUTLASS plan glue (fused_gemm_plan.cu) and the kernel instantiations (one .cu
// each, so a build compiles them in parallel). Everything here is compiled for sm_90a only.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

#include <memory>

#include "cuda/cutlass/gemm_choice.h"
#include "cuda/cutlass/gn_epilogue.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

struct GemmShape {
  int M, N, K;  // rows of X, channels (rows of W), inner dimension
};

// One planned launch of one instantiation. create() (the factory) resolves everything that depends only on the
// shapes and the device: CUTLASS's can_implement, the workspace check, the shared-memory attribute, the persistent
// grid and the cluster occupancy. run() copies the planned arguments, sets the call's pointers, lets CUTLASS build
// the kernel parameters (host-only: it re-encodes the TMA descriptors, which hold the X and W addresses) and
// enqueues one launch: no allocation, synchronisation or device query.
class FusedKernel {
 public:
  virtual ~FusedKernel() = default;
  // w_lo: W's lo part for a kernel on presplit weights (then w is W's hi part); ignored by the others.
  virtual cudaError_t run(const void* x, const void* w, const void* w_lo, const GnEpilogueParams& epi,
                          cudaStream_t stream) const = 0;
};
using FusedKernelPtr = std::unique_ptr<FusedKernel>;

// FUSEDOPS_OK with *out, or an error code with a message. `epi` carries the plan's epilogue (pointers null).
using FusedKernelFactory = int (*)(const GemmShape& shape, const GnEpilogueParams& epi, int device, int sm_count,
                                   FusedKernelPtr* out, char* err, size_t err_len);

// The factory of configuration `config` of `mode` (the rows of gemm_choice.h's tables), or null if none is built.
FusedKernelFactory factory(gemm_choice::Mode mode, int config);
// The factory of row `row` of gemm_choice.h's kThreeTf32PresplitConfigs (3xTF32 on presplit weights), or null.
FusedKernelFactory presplit_factory(int row);

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
