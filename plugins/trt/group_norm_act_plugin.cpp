// GroupNormAct: Y = reduce_C(post(GroupNorm(pre(X)))), X of shape (N, C, *spatial) with 0-3 spatial dims.
#include <string>

#include "fused_op_plugin.h"

namespace fusedops::trt {

using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::IExprBuilder;
using nvinfer1::IPluginV3;

namespace {
bool constantValue(nvinfer1::IDimensionExpr const* e, int64_t& v) {
  if (e == nullptr || !e->isConstant()) return false;
  v = e->getConstantValue();
  return true;
}
}  // namespace

IPluginV3* GroupNormActPlugin::clone() noexcept {
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

bool GroupNormActPlugin::inferOutputShape(DimsExprs const* inputs, DimsExprs& output, IExprBuilder& builder,
                                          std::string& err) const {
  DimsExprs const& x = inputs[0];
  if (x.nbDims < 2 || x.nbDims > 5) {
    err = "X must have rank 2-5 (N, C, *spatial), got rank " + std::to_string(x.nbDims);
    return false;
  }
  int64_t c = 0;
  if (constantValue(x.d[1], c)) {
    if (c <= 0 || c % mCfg.numGroups != 0) {
      err = "C=" + std::to_string(c) + " is not divisible by num_groups=" + std::to_string(mCfg.numGroups);
      return false;
    }
    for (int32_t i = 1; i < mCfg.numInputs(); ++i) {
      int64_t n = 1;
      bool known = true;
      for (int32_t k = 0; k < inputs[i].nbDims && known; ++k) {
        int64_t v = 0;
        known = constantValue(inputs[i].d[k], v);
        n *= v;
      }
      if (known && n != c) {
        err = inputName(i) + " has " + std::to_string(n) + " elements, expected C=" + std::to_string(c);
        return false;
      }
    }
  }
  output.nbDims = x.nbDims;
  for (int32_t k = 0; k < x.nbDims; ++k) output.d[k] = x.d[k];  // batch and spatial dims stay symbolic
  if (mCfg.reduce != FUSEDOPS_REDUCE_NONE) output.d[1] = builder.constant(1);
  return true;
}

bool GroupNormActPlugin::describe(Dims const* dims, RunDesc& desc, std::string& err) const {
  Dims const& x = dims[0];
  if (x.nbDims < 2 || x.nbDims > 5) {
    err = "X must have rank 2-5 (N, C, *spatial), got shape " + dimsText(x);
    return false;
  }
  int64_t const c = x.d[1];
  for (int32_t i = 1; i < mCfg.numInputs(); ++i) {
    if (volume(dims[i]) != c) {
      err = inputName(i) + " has shape " + dimsText(dims[i]) + ", expected C=" + std::to_string(c) + " elements";
      return false;
    }
  }
  fusedops_groupnorm_desc& g = desc.gn;
  g.N = x.d[0];
  g.C = c;
  g.S = volume(x, 2);
  g.num_groups = mCfg.numGroups;
  g.epsilon = mCfg.epsilon;
  g.pre = mCfg.pre;
  g.post = mCfg.post;
  g.reduce = mCfg.reduce;
  return true;
}

int32_t GroupNormActPlugin::check(RunDesc const& desc, char* err, size_t errLen) const noexcept {
  return fusedops_groupnorm_act_check(&desc.gn, err, errLen);
}

size_t GroupNormActPlugin::workspaceSize(RunDesc const& desc) const noexcept {
  return fusedops_groupnorm_act_workspace_size(&desc.gn);
}

int32_t GroupNormActPlugin::launch(RunDesc const& desc, void const* const* inputs, void* output, void* workspace,
                                   size_t workspaceBytes, cudaStream_t stream, char* err,
                                   size_t errLen) const noexcept {
  return fusedops_groupnorm_act_cuda(&desc.gn, inputs[0], inputs[1], inputs[2], inputs + 3, mCfg.numExtras, output,
                                     workspace, workspaceBytes, reinterpret_cast<fusedops_stream_t>(stream), err,
                                     errLen);
}

}  // namespace fusedops::trt
