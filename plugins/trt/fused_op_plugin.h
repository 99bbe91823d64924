// The fusedops IPluginV3 plugins: GroupNormAct, GemmGroupNormAct and ConvTransposeGroupNormAct (names = ONNX op
// types, namespace "fusedops", version "1"). All are thin adapters over the C ABI (fusedops/fusedops.h): output shape
// expressions and format negotiation here; attribute parsing, the shape rules, plans and all arithmetic in the kernel
// library. A plan is made at onShapeChange (per execution context and shape) and only run at enqueue. See README.md
// beside this file.
#ifndef FUSEDOPS_TRT_FUSED_OP_PLUGIN_H_
#define FUSEDOPS_TRT_FUSED_OP_PLUGIN_H_

#include <memory>
#include <string>
#include <vector>

#include "fusedops_trt_common.h"

namespace fusedops::trt {

// One descriptor type for every op (GroupNormAct uses d.gn only).
using RunDesc = fusedops_op_desc;

// A plan of the kernel library and the tensor descriptions (TensorRT's inputs, then the output) it was made for.
struct PlanHolder {
  fusedops_plan* plan = nullptr;
  std::vector<nvinfer1::PluginTensorDesc> descs;
  ~PlanHolder() { fusedops_plan_destroy(plan); }
};

// Shape combinations getWorkspaceSize evaluates exhaustively; larger profiles are sampled (README.md, Workspace).
inline constexpr int64_t kMaxWorkspaceProbes = int64_t{1} << 18;

class FusedOpPlugin : public nvinfer1::IPluginV3,
                      public nvinfer1::IPluginV3OneCore,
                      public nvinfer1::IPluginV3OneBuild,
                      public nvinfer1::IPluginV3OneRuntime {
 public:
  explicit FusedOpPlugin(OpConfig cfg) : mCfg(std::move(cfg)) {}
  ~FusedOpPlugin() override = default;
  FusedOpPlugin(FusedOpPlugin const&) = delete;
  FusedOpPlugin& operator=(FusedOpPlugin const&) = delete;

  OpConfig const& config() const noexcept { return mCfg; }

  // IPluginV3
  nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;

  // IPluginV3OneCore
  nvinfer1::AsciiChar const* getPluginName() const noexcept override { return opName(mCfg.kind); }
  nvinfer1::AsciiChar const* getPluginVersion() const noexcept override { return kPluginVersion; }
  nvinfer1::AsciiChar const* getPluginNamespace() const noexcept override { return kPluginNamespace; }

  // IPluginV3OneBuild
  int32_t getNbOutputs() const noexcept override { return 1; }
  int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs, nvinfer1::DataType const* inputTypes,
                             int32_t nbInputs) const noexcept override;
  int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
                          int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                          nvinfer1::IExprBuilder& exprBuilder) noexcept override;
  bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
                                 int32_t nbOutputs) noexcept override;
  int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
                          nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
  size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
                          nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;

  // IPluginV3OneRuntime
  int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
                        int32_t nbOutputs) noexcept override;
  int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
                  void const* const* inputs, void* const* outputs, void* workspace,
                  cudaStream_t stream) noexcept override;
  nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
  nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

 protected:
  // Number of leading inputs that carry X's data type (GroupNormAct: X; the others: X, W). The rest are parameters
  // (float32 or X's type, all one type).
  virtual int32_t numDataTypedInputs() const noexcept = 0;
  // The name of input `index` in node order (the C ABI's: B counted even where TensorRT's inputs lack it).
  virtual std::string inputName(int32_t index) const = 0;
  // Output shape expressions (the library's shape rules have already accepted what is constant).
  virtual void outputExprs(nvinfer1::DimsExprs const* inputs, nvinfer1::DimsExprs& output,
                           nvinfer1::IExprBuilder& builder) const = 0;

  // TensorRT's input count against the node's: every input, or (ConvTransposeGroupNormAct) all but an absent B; a
  // known biasInput must agree.
  bool checkCounts(int32_t nbInputs, int32_t nbOutputs, std::string& err) const;
  bool countOk(int32_t nbInputs) const noexcept;
  bool biasGiven(int32_t nbInputs) const noexcept { return !mCfg.optionalBias() || nbInputs == mCfg.numInputs(); }
  // TensorRT's input `given` → its index in node order.
  int32_t nodeIndex(int32_t given, int32_t nbInputs) const noexcept {
    return given >= 2 && !biasGiven(nbInputs) ? given + 1 : given;
  }
  std::string givenName(int32_t given, int32_t nbInputs) const { return inputName(nodeIndex(given, nbInputs)); }
  // The input count enqueue runs with (it is told none): -1 while biasInput is unknown.
  int32_t runtimeInputCount() const noexcept {
    return !mCfg.optionalBias() ? mCfg.numInputs() : mCfg.biasInput < 0 ? -1 : mCfg.numInputs() - 1 + mCfg.biasInput;
  }
  void rememberInputCount(int32_t nbInputs) noexcept {
    if (mCfg.optionalBias()) mCfg.biasInput = biasGiven(nbInputs) ? 1 : 0;
  }
  // dims of TensorRT's nbInputs inputs + dtypes → the library's checked descriptor (fusedops_describe, node order,
  // an absent B as unknown); false with its message. dims may hold -1 (unknown) while building; `outputVolume`
  // then is -1.
  bool checkedDesc(nvinfer1::Dims const* dims, int32_t nbInputs, nvinfer1::DataType xType,
                   nvinfer1::DataType paramType, RunDesc& desc, std::string& err,
                   int64_t* outputVolume = nullptr) const;
  void fail(std::string const& where, std::string const& err) const noexcept;
  // Largest kernel workspace need over the shapes of the profile's [min, max] ranges. The need is not monotone in
  // the batch (the kernels split small problems into more blocks), so the ends of the range are not enough
  // (plugin_workspace.cpp).
  size_t profileWorkspace(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs) const;
  // onShapeChange / enqueue descriptions → checked descriptor: types and formats as negotiated, the output's size,
  // and a workspace need within what TensorRT reserved.
  bool runtimeDesc(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
                   RunDesc& desc, std::string& err) const;

  // The plan for these tensor descriptions: the current one when dims, types and formats all match, else a new one
  // made after the full checks (onShapeChange makes it; enqueue only runs it).
  bool planFor(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
               std::string& err);

  OpConfig mCfg;
  SerializedFields mSerialized;
  std::shared_ptr<PlanHolder> mPlan;  // this execution context's (attachToContext clones the plugin)
};

// One op's plugin: FusedOpPlugin plus the op's input names, data-typed inputs and output shape (outputExprs, in the
// op's own .cpp: group_norm_act_plugin.cpp, gemm_group_norm_act_plugin.cpp, convtranspose_group_norm_act_plugin.cpp).
template <OpKind K>
class OpPlugin final : public FusedOpPlugin {
 public:
  using FusedOpPlugin::FusedOpPlugin;
  nvinfer1::IPluginV3* clone() noexcept override {
    try {
      return new OpPlugin(mCfg);
    } catch (...) {
      return nullptr;
    }
  }

 protected:
  static constexpr bool kHasW = K != OpKind::kGroupNormAct;  // X · Wᵀ or ConvTranspose(X, W): W typed as X, and B
  int32_t numDataTypedInputs() const noexcept override { return kHasW ? 2 : 1; }
  std::string inputName(int32_t index) const override {
    static char const* const kNames[] = {"X", "W", "B", "gamma", "beta"};
    const int32_t fixed = kHasW ? 5 : 3;
    if (index >= fixed) return "extra_" + std::to_string(index - fixed);
    return kNames[kHasW || index == 0 ? index : index + 2];
  }
  void outputExprs(nvinfer1::DimsExprs const* inputs, nvinfer1::DimsExprs& output,
                   nvinfer1::IExprBuilder& builder) const override;
};
using GroupNormActPlugin = OpPlugin<OpKind::kGroupNormAct>;
using GemmGroupNormActPlugin = OpPlugin<OpKind::kGemmGroupNormAct>;
using ConvTransposeGroupNormActPlugin = OpPlugin<OpKind::kConvTransposeGroupNormAct>;
template <>
void GroupNormActPlugin::outputExprs(nvinfer1::DimsExprs const*, nvinfer1::DimsExprs&, nvinfer1::IExprBuilder&) const;
template <>
void GemmGroupNormActPlugin::outputExprs(nvinfer1::DimsExprs const*, nvinfer1::DimsExprs&,
                                         nvinfer1::IExprBuilder&) const;
template <>
void ConvTransposeGroupNormActPlugin::outputExprs(nvinfer1::DimsExprs const*, nvinfer1::DimsExprs&,
                                                  nvinfer1::IExprBuilder&) const;

// IPluginCreatorV3One for one op; creates the plugin in both phases from the same field set.
class FusedOpCreator final : public nvinfer1::IPluginCreatorV3One {
 public:
  explicit FusedOpCreator(OpKind kind);
  nvinfer1::IPluginV3* createPlugin(nvinfer1::AsciiChar const* name, nvinfer1::PluginFieldCollection const* fc,
                                    nvinfer1::TensorRTPhase phase) noexcept override;
  nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override { return &mFieldNames; }
  nvinfer1::AsciiChar const* getPluginName() const noexcept override { return opName(mKind); }
  nvinfer1::AsciiChar const* getPluginVersion() const noexcept override { return kPluginVersion; }
  nvinfer1::AsciiChar const* getPluginNamespace() const noexcept override { return kPluginNamespace; }

 private:
  OpKind mKind;
  std::vector<nvinfer1::PluginField> mFields;
  nvinfer1::PluginFieldCollection mFieldNames{};
};

}  // namespace fusedops::trt

#endif  // FUSEDOPS_TRT_FUSED_OP_PLUGIN_H_
