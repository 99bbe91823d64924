// ConvTransposeGroupNormAct on the CPU (cpu_convt.cpp). Internal to the core; plans call it (plan.cpp).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "fusedops/fusedops.h"

namespace fusedops {
namespace cpu {

// One run of a complete, checked descriptor: inputs X, W, B (may be NULL), gamma, beta, extras...; host pointers.
int convt_groupnorm_act_cpu(const fusedops_op_desc& d, const void* const* inputs, int32_t num_inputs, void* y,
                            char* err, size_t err_len);

}  // namespace cpu
}  // namespace fusedops
