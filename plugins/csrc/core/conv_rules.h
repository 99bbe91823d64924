// ONNX ConvTranspose's per-dimension rules, the one copy that fusedops_describe (core/describe.cpp) and plan creation's
// check of a complete descriptor (plan.cpp) both use, and the descriptor's geometry as rows / columns for the kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fusedops/fusedops.h"

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

// A 1-D or 2-D descriptor as rows x columns (1-D: one row, kernel height 1, no row padding).
struct ConvGeometry {
  int64_t hin, win, hout, wout, kh, kw, sh, sw, ph, pw, dh, dw;
};
inline ConvGeometry conv_geometry(const fusedops_conv_desc& cv) {
  const bool one_d = cv.spatial_rank == 1;
  const int i = one_d ? 0 : 1;  // the column dimension in the descriptor's arrays
  return {one_d ? 1 : cv.input[0], cv.input[i],        one_d ? 1 : cv.output[0], cv.output[i],
          one_d ? 1 : cv.kernel[0], cv.kernel[i],      one_d ? 1 : cv.strides[0], cv.strides[i],
          one_d ? 0 : cv.pads_begin[0], cv.pads_begin[i], one_d ? 1 : cv.dilations[0], cv.dilations[i]};
}

}  // namespace core
}  // namespace fusedops
