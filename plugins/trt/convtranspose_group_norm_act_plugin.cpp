// ConvTransposeGroupNormAct: Y = reduce_C(post(GroupNorm(pre(ConvTranspose(X, W) + B)))), ONNX ConvTranspose with
// explicit pads; X (N, Cin, *spatial) with 1 or 2 spatial dims, W (Cin, C / group, *kernel), B optional.
#include <string>

#include "fused_op_plugin.h"

namespace fusedops::trt {

using nvinfer1::DimensionOperation;
using nvinfer1::IDimensionExpr;

// Per spatial dim i: strides[i] * (input[i] - 1) + output_padding[i] + dilations[i] * (kernel[i] - 1) + 1
// - pads_begin[i] - pads_end[i] (fusedops_conv_desc), times min(input[i], 1): an empty input gives an empty output,
// as the library's shape rule has it. Batch and input sizes stay symbolic; constants fold. A null from the builder
// propagates (getOutputShapes then refuses with a message).
template <>
void ConvTransposeGroupNormActPlugin::outputExprs(nvinfer1::DimsExprs const* inputs, nvinfer1::DimsExprs& output,
                                                  nvinfer1::IExprBuilder& builder) const {
  nvinfer1::DimsExprs const& x = inputs[0];
  nvinfer1::DimsExprs const& w = inputs[1];
  auto const op = [&](DimensionOperation o, IDimensionExpr const* a, IDimensionExpr const* b) -> IDimensionExpr const* {
    return a != nullptr && b != nullptr ? builder.operation(o, *a, *b) : nullptr;
  };
  auto const plus = [&](IDimensionExpr const* a, int64_t c) -> IDimensionExpr const* {
    if (c == 0) return a;
    return c > 0 ? op(DimensionOperation::kSUM, a, builder.constant(c))
                 : op(DimensionOperation::kSUB, a, builder.constant(-c));
  };
  auto const times = [&](int64_t c, IDimensionExpr const* a) -> IDimensionExpr const* {
    return c == 1 ? a : op(DimensionOperation::kPROD, builder.constant(c), a);
  };
  fusedops_conv_desc const& cv = mCfg.tmpl.conv;  // attributes with ONNX's defaults; kernel 0 = W's
  output.nbDims = x.nbDims;
  output.d[0] = x.d[0];
  output.d[1] = mCfg.reduce() != FUSEDOPS_REDUCE_NONE ? builder.constant(1) : times(cv.group, w.d[1]);
  for (int32_t i = 0; i + 2 < x.nbDims; ++i) {
    IDimensionExpr const* in = x.d[2 + i];
    IDimensionExpr const* kernel = cv.kernel[i] != 0 ? builder.constant(cv.kernel[i]) : w.d[2 + i];
    IDimensionExpr const* span = plus(times(cv.dilations[i], plus(kernel, -1)),
                                      1 + int64_t{cv.output_padding[i]} - cv.pads_begin[i] - cv.pads_end[i]);
    IDimensionExpr const* full = op(DimensionOperation::kSUM, times(cv.strides[i], plus(in, -1)), span);
    output.d[2 + i] = op(DimensionOperation::kPROD, full, op(DimensionOperation::kMIN, in, builder.constant(1)));
  }
}

}  // namespace fusedops::trt
