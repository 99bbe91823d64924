// The GEMM of GemmGroupNormAct for a few rows (batch 1-16 of a Linear): D (M, C) = X (M, K) · Wᵀ with W stored
// (C, K) row-major. At such M the GEMM is a read of W (256 MB for the reference models in float32) and nothing
// else, so this kernel is built to stream W at the memory's speed: each warp owns a few rows of W, reads them with
// 16-byte loads that bypass L1, and multiplies them by X's rows (read through L1, where every warp of a block finds
// them), accumulating in float32 on the CUDA cores (float32 inputs: IEEE FMA, i.e. strict FP32, never TF32).
// No bias: the GroupNorm epilogue adds it, as it does after a cuBLASLt GEMM without a bias epilogue.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

namespace fusedops {
namespace cuda {

// Which descriptors the kernel takes is the planner's rule (gemm_choice.cpp, skinny_blocker: M in 1..kSkinnyMaxRows,
// W stored (C, K), rows a whole number of 16-byte vectors). A call also needs X and W 16-byte aligned (the plan
// checks, as for its planned cuBLASLt algorithm); other calls run the plan's cuBLASLt path.

// Enqueues D = X · Wᵀ on `stream`; D in X's dtype. No allocation, no synchronisation: capturable in a CUDA graph.
cudaError_t run_skinny_gemm(const void* x, const void* w, void* d, int64_t M, int64_t C, int64_t K, int32_t dtype,
                            cudaStream_t stream);

}  // namespace cuda
}  // namespace fusedops
