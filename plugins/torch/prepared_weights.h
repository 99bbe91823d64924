// W's prepared form for the PyTorch ops (fusedops_plan_prepare_weights: 3xTF32 plans take W split once into its TF32
// hi and lo parts instead of splitting it in every call), kept per weight tensor while that tensor lives and is not
// modified (autograd's version counter).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "fusedops/fusedops.h"

namespace fusedops_torch {

// W's prepared form for a run of `plan` on `stream`: the cached one when W (the caller's own tensor, the same
// storage, the same version) was prepared before, else a new one written now. An undefined tensor when the plan takes
// none, preparing is switched off, W's changes cannot be tracked (an inference tensor: no version counter) or the
// stream is being captured into a CUDA graph (a buffer written at replay only must not be cached).
at::Tensor prepared_weights_for(const fusedops_plan* plan, size_t prepared_bytes, const at::Tensor& w,
                                const c10::Stream& stream);

// Drops every cached form (their memory returns to PyTorch's allocator).
void forget_prepared_weights();
// On by default; off: runs split W in every call and nothing is cached.
void set_prepared_weights(bool on);
// Forms cached now (tests).
int64_t prepared_weights_count();

}  // namespace fusedops_torch
