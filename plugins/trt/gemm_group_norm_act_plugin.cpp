// GemmGroupNormAct: Y = reduce_C(post(GroupNorm(pre(X @ W^T + B)))); X (..., K) is a batch of rows, each row a sample.
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

IPluginV3* GemmGroupNormActPlugin::clone() noexcept {
  try {
    return new GemmGroupNormActPlugin(mCfg);
  } catch (...) {
    return nullptr;
  }
}

std::string GemmGroupNormActPlugin::inputName(int32_t index) const {
  static char const* const kNames[] = {"X", "W", "B", "gamma", "beta"};
  return index < 5 ? kNames[index] : "extra_" + std::to_string(index - 5);
}

bool GemmGroupNormActPlugin::inferOutputShape(DimsExprs const* inputs, DimsExprs& output, IExprBuilder& builder,
                                              std::string& err) const {
  DimsExprs const& x = inputs[0];
  DimsExprs const& w = inputs[1];
  if (x.nbDims < 2) {
    err = "X must have rank >= 2 (rows, K), got rank " + std::to_string(x.nbDims);
    return false;
  }
  if (w.nbDims != 2) {
    err = "W must be 2-D, got rank " + std::to_string(w.nbDims);
    return false;
  }
  nvinfer1::IDimensionExpr const* cExpr = mCfg.transB ? w.d[0] : w.d[1];
  nvinfer1::IDimensionExpr const* wkExpr = mCfg.transB ? w.d[1] : w.d[0];
  int64_t k = 0, wk = 0, c = 0;
  if (constantValue(x.d[x.nbDims - 1], k) && constantValue(wkExpr, wk) && k != wk) {
    err = "X has K=" + std::to_string(k) + " features but W (trans_b=" + std::to_string(mCfg.transB) + ") expects " +
          std::to_string(wk);
    return false;
  }
  if (constantValue(cExpr, c)) {
    if (c <= 0 || c % mCfg.numGroups != 0) {
      err = "C=" + std::to_string(c) + " is not divisible by num_groups=" + std::to_string(mCfg.numGroups);
      return false;
    }
    for (int32_t i = 2; i < mCfg.numInputs(); ++i) {
      int64_t n = 1;
      bool known = true;
      for (int32_t d = 0; d < inputs[i].nbDims && known; ++d) {
        int64_t v = 0;
        known = constantValue(inputs[i].d[d], v);
        n *= v;
      }
      if (known && n != c) {
        err = inputName(i) + " has " + std::to_string(n) + " elements, expected C=" + std::to_string(c);
        return false;
      }
    }
  }
  output.nbDims = x.nbDims;
  for (int32_t d = 0; d + 1 < x.nbDims; ++d) output.d[d] = x.d[d];  // leading (batch) dims stay symbolic
  output.d[x.nbDims - 1] = mCfg.reduce != FUSEDOPS_REDUCE_NONE ? builder.constant(1) : cExpr;
  return true;
}

bool GemmGroupNormActPlugin::describe(Dims const* dims, RunDesc& desc, std::string& err) const {
  Dims const& x = dims[0];
  Dims const& w = dims[1];
  if (x.nbDims < 2) {
    err = "X must have rank >= 2 (rows, K), got shape " + dimsText(x);
    return false;
  }
  if (w.nbDims != 2) {
    err = "W must be 2-D, got shape " + dimsText(w);
    return false;
  }
  int64_t const k = x.d[x.nbDims - 1];
  int64_t const c = mCfg.transB ? w.d[0] : w.d[1];
  int64_t const wk = mCfg.transB ? w.d[1] : w.d[0];
  if (wk != k) {
    err = "X of shape " + dimsText(x) + " has K=" + std::to_string(k) + " features but W of shape " + dimsText(w) +
          " (trans_b=" + std::to_string(mCfg.transB) + ") expects " + std::to_string(wk);
    return false;
  }
  for (int32_t i = 2; i < mCfg.numInputs(); ++i) {
    if (volume(dims[i]) != c) {
      err = inputName(i) + " has shape " + dimsText(dims[i]) + ", expected C=" + std::to_string(c) + " elements";
      return false;
    }
  }
  fusedops_groupnorm_desc& g = desc.gn;
  g.N = volume(x, 0, x.nbDims - 1);
  g.C = c;
  g.S = 1;
  g.num_groups = mCfg.numGroups;
  g.epsilon = mCfg.epsilon;
  g.pre = mCfg.pre;
  g.post = mCfg.post;
  g.reduce = mCfg.reduce;
  desc.K = k;
  desc.trans_b = mCfg.transB;
  desc.allow_tf32 = mCfg.allowTf32;
  return true;
}

int32_t GemmGroupNormActPlugin::check(RunDesc const& desc, char* err, size_t errLen) const noexcept {
  return fusedops_gemm_groupnorm_act_check(&desc, err, errLen);
}

size_t GemmGroupNormActPlugin::workspaceSize(RunDesc const& desc) const noexcept {
  return fusedops_gemm_groupnorm_act_workspace_size(&desc);
}

int32_t GemmGroupNormActPlugin::launch(RunDesc const& desc, void const* const* inputs, void* output, void* workspace,
                                       size_t workspaceBytes, cudaStream_t stream, char* err,
                                       size_t errLen) const noexcept {
  return fusedops_gemm_groupnorm_act_cuda(&desc, inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], inputs + 5,
                                          mCfg.numExtras, output, workspace, workspaceBytes,
                                          reinterpret_cast<fusedops_stream_t>(stream), err, errLen);
}

}  // namespace fusedops::trt
