// GroupNormAct: Y = reduce_C(post(GroupNorm(pre(X)))), X of shape (N, C, *spatial) with 0-3 spatial dims.
#include <string>

#include "fused_op_plugin.h"

namespace fusedops::trt {

template <>
void GroupNormActPlugin::outputExprs(nvinfer1::DimsExprs const* inputs, nvinfer1::DimsExprs& output,
                                     nvinfer1::IExprBuilder& builder) const {
  nvinfer1::DimsExprs const& x = inputs[0];
  output.nbDims = x.nbDims;
  for (int32_t k = 0; k < x.nbDims; ++k) output.d[k] = x.d[k];  // batch and spatial dims stay symbolic
  if (mCfg.reduce() != FUSEDOPS_REDUCE_NONE) output.d[1] = builder.constant(1);
}

}  // namespace fusedops::trt
