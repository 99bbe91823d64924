// GroupNormAct: Y = reduce_C(post(GroupNorm(pre(X)))), X of shape (N, C, *spatial) with 0-3 spatial dims.
#include <string>

#include "fused_op_plugin.h"

namespace fusedops::trt {

nvinfer1::IPluginV3* GroupNormActPlugin::clone() noexcept {
  try {
    return new GroupNormActPlugin(mCfg);
  } catch (...) {
    return nullptr;
  }
}

std::string GroupNormActPlugin::inputName(int32_t index) const {
  static char const* const kNames[] = {"X", "gamma", "beta"};
  return index < 3 ? kNames[index] : "extra_" + std::to_string(index - 3);
}

void GroupNormActPlugin::outputExprs(nvinfer1::DimsExprs const* inputs, nvinfer1::DimsExprs& output,
                                     nvinfer1::IExprBuilder& builder) const {
  nvinfer1::DimsExprs const& x = inputs[0];
  output.nbDims = x.nbDims;
  for (int32_t k = 0; k < x.nbDims; ++k) output.d[k] = x.d[k];  // batch and spatial dims stay symbolic
  if (mCfg.reduce() != FUSEDOPS_REDUCE_NONE) output.d[1] = builder.constant(1);
}

}  // namespace fusedops::trt
