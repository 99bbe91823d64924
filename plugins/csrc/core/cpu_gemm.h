// GemmGroupNormAct on the CPU (cpu_gemm.cpp): the tiled GEMM and its row epilogue. Internal to the core; the C ABI
// entry fusedops_gemm_groupnorm_act_cpu (cpu_kernels.cpp) checks the arguments and calls it.
#pragma once

#include "core/cpu_util.h"

namespace fusedops {
namespace cpu {

// Y = GroupNormAct(X·op(W) + bias) for a checked descriptor; p holds the float32 per-channel vectors (bias
// included). Throws std::bad_alloc when scratch cannot be allocated.
void gemm_groupnorm(const fusedops_gemm_desc& gd, const void* x, const void* w, const ChannelParams& p, void* y);

}  // namespace cpu
}  // namespace fusedops
