// GemmGroupNormAct: Y = reduce_C(post(GroupNorm(pre(X · Wᵀ + B)))), every row of X (all leading dims) one sample.
#include <string>

#include "fused_op_plugin.h"

namespace fusedops::trt {

template <>
void GemmGroupNormActPlugin::outputExprs(nvinfer1::DimsExprs const* inputs, nvinfer1::DimsExprs& output,
                                         nvinfer1::IExprBuilder& builder) const {
  nvinfer1::DimsExprs const& x = inputs[0];
  nvinfer1::DimsExprs const& w = inputs[1];
  output.nbDims = x.nbDims;
  for (int32_t d = 0; d + 1 < x.nbDims; ++d) output.d[d] = x.d[d];  // leading (batch) dims stay symbolic
  output.d[x.nbDims - 1] =
      mCfg.reduce() != FUSEDOPS_REDUCE_NONE ? builder.constant(1) : (mCfg.transB ? w.d[0] : w.d[1]);
}

}  // namespace fusedops::trt
