// ONNX ConvTranspose's per-dimension rules, the one copy that fusedops_describe (core/describe.cpp) and plan creation's
// check of a complete descriptor (plan.cpp) both use.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fusedops {
namespace core {

// Output size of one spatial dimension: stride * (in - 1) + output_padding + dilation * (kernel - 1) + 1 - pads.
inline int64_t convtranspose_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad_begin,
                                         int64_t pad_end, int64_t output_padding, int64_t dilation) {
  return stride * (in - 1) + output_padding + dilation * (kernel - 1) + 1 - pad_begin - pad_end;
}

// What is wrong with one spatial dimension's attributes, or nullptr.
inline const char* convtranspose_dim_problem(int64_t kernel, int64_t stride, int64_t dilation, int64_t pad_begin,
                                             int64_t pad_end, int64_t output_padding) {
  if (kernel < 1) return "the kernel size must be >= 1";
  if (stride < 1) return "the stride must be >= 1";
  if (dilation < 1) return "the dilation must be >= 1";
  if (pad_begin < 0 || pad_end < 0) return "pads must be >= 0";
  if (output_padding < 0 || output_padding >= std::max(stride, dilation))
    return "output_padding must be in [0, max(stride, dilation))";
  return nullptr;
}

}  // namespace core
}  // namespace fusedops
