// What the fused-op plugins share: capability routing, input counts, type/format negotiation, configure / workspace /
// enqueue flow (the workspace over the profile: plugin_workspace.cpp).
#include "fused_op_plugin.h"

#include <algorithm>
#include <exception>
#include <new>

namespace fusedops::trt {

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IExprBuilder;
using nvinfer1::IPluginCapability;
using nvinfer1::IPluginV3;
using nvinfer1::PluginCapabilityType;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace {
constexpr size_t kErrLen = 1024;

char const* typeName(DataType t) {
  switch (t) {
    case DataType::kFLOAT: return "float32";
    case DataType::kHALF: return "float16";
    case DataType::kBF16: return "bfloat16";
    default: return "an unsupported type";
  }
}
}  // namespace

IPluginCapability* FusedOpPlugin::getCapabilityInterface(PluginCapabilityType type) noexcept {
  switch (type) {
    case PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
    case PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
  }
  return nullptr;
}

void FusedOpPlugin::fail(std::string const& where, std::string const& err) const noexcept {
  logError(std::string(opName(mCfg.kind)) + "::" + where + ": " + err);
}

bool FusedOpPlugin::countOk(int32_t nbInputs) const noexcept {
  int32_t const all = mCfg.numInputs();
  if (!mCfg.optionalBias()) return nbInputs == all;
  if (mCfg.biasInput >= 0) return nbInputs == all - 1 + mCfg.biasInput;
  return nbInputs == all || nbInputs == all - 1;
}

bool FusedOpPlugin::checkCounts(int32_t nbInputs, int32_t nbOutputs, std::string& err) const {
  if (!countOk(nbInputs)) {
    int32_t const all = mCfg.numInputs();
    std::string const extras = std::to_string(mCfg.numExtras) + " extra inputs referenced by the chains";
    if (!mCfg.optionalBias())
      err = "expected " + std::to_string(all) + " inputs (" + std::to_string(mCfg.numFixedInputs()) + " + " + extras +
            ")";
    else if (mCfg.biasInput < 0)
      err = "expected " + std::to_string(all) + " inputs (X, W, B, gamma, beta + " + extras + ") or " +
            std::to_string(all - 1) + " without the optional B (X, W, gamma, beta + the extras)";
    else
      err = "expected " + std::to_string(all - 1 + mCfg.biasInput) + " inputs (has_bias = " +
            std::to_string(mCfg.biasInput) + ": X, W, " + (mCfg.biasInput ? "B, " : "") + "gamma, beta + " + extras +
            ")";
    err += ", got " + std::to_string(nbInputs);
    return false;
  }
  if (nbOutputs != 1) {
    err = "expected 1 output, got " + std::to_string(nbOutputs);
    return false;
  }
  return true;
}

bool FusedOpPlugin::checkedDesc(Dims const* dims, int32_t nbInputs, DataType xType, DataType paramType,
                                RunDesc& desc, std::string& err, int64_t* outputVolume) const {
  int32_t const firstParam = numDataTypedInputs();
  std::vector<fusedops_tensor_desc> in(static_cast<size_t>(mCfg.numInputs()));
  if (!biasGiven(nbInputs)) {  // an absent B, as the C ABI takes it
    in[2].dtype = FUSEDOPS_DTYPE_UNKNOWN;
    in[2].rank = -1;
  }
  for (int32_t g = 0; g < nbInputs; ++g) {
    fusedops_tensor_desc& t = in[static_cast<size_t>(nodeIndex(g, nbInputs))];
    t.dtype = toFusedopsDtype(g < firstParam ? xType : paramType);
    t.rank = dims[g].nbDims;
    if (t.rank > FUSEDOPS_MAX_RANK) {
      err = givenName(g, nbInputs) + " has rank " + std::to_string(t.rank) + "; at most " +
            std::to_string(FUSEDOPS_MAX_RANK) + " is supported";
      return false;
    }
    for (int32_t k = 0; k < t.rank; ++k) t.dims[k] = dims[g].d[k];
  }
  desc = mCfg.tmpl;
  fusedops_tensor_desc y{};
  char msg[kErrLen] = {0};
  if (fusedops_describe(&desc, in.data(), mCfg.numInputs(), &y, msg, sizeof msg) != FUSEDOPS_OK) {
    std::string const prefix = std::string(opName(mCfg.kind)) + ": ";
    err = std::string(msg).rfind(prefix, 0) == 0 ? std::string(msg + prefix.size()) : std::string(msg);
    return false;
  }
  if (outputVolume != nullptr) {
    int64_t v = 1;
    for (int32_t k = 0; k < y.rank && v >= 0; ++k) v = y.dims[k] < 0 ? -1 : v * y.dims[k];
    *outputVolume = v;
  }
  return true;
}

int32_t FusedOpPlugin::getOutputDataTypes(DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes,
                                          int32_t nbInputs) const noexcept {
  try {
    std::string err;
    if (!checkCounts(nbInputs, nbOutputs, err)) {
      fail("getOutputDataTypes", err);
      return -1;
    }
    if (!isSupportedFloat(inputTypes[0])) {
      fail("getOutputDataTypes", "input X must be float32, float16 or bfloat16");
      return -1;
    }
    outputTypes[0] = inputTypes[0];  // Y has X's type
    return 0;
  } catch (...) {
    return -1;
  }
}

int32_t FusedOpPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
                                       int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs,
                                       IExprBuilder& exprBuilder) noexcept {
  try {
    std::string err;
    if (!checkCounts(nbInputs, nbOutputs, err)) {
      fail("getOutputShapes", err);
      return -1;
    }
    if (nbShapeInputs != 0) {
      fail("getOutputShapes", "the plugin takes no shape inputs");
      return -1;
    }
    // The library's shape rules on what is constant (the rest is checked at configurePlugin and at run), so a
    // wrong model fails while building.
    std::vector<Dims> known(static_cast<size_t>(nbInputs));
    for (int32_t i = 0; i < nbInputs; ++i) {
      known[i].nbDims = inputs[i].nbDims;
      for (int32_t k = 0; k < inputs[i].nbDims; ++k)
        known[i].d[k] = inputs[i].d[k] != nullptr && inputs[i].d[k]->isConstant() ? inputs[i].d[k]->getConstantValue()
                                                                                 : -1;
    }
    RunDesc desc;
    if (!checkedDesc(known.data(), nbInputs, DataType::kFLOAT, DataType::kFLOAT, desc, err)) {
      fail("getOutputShapes", err);
      return -1;
    }
    outputExprs(inputs, outputs[0], exprBuilder);
    for (int32_t k = 0; k < outputs[0].nbDims; ++k)
      if (outputs[0].d[k] == nullptr) {
        fail("getOutputShapes", "the expression builder gave no expression for output dim " + std::to_string(k));
        return -1;
      }
    return 0;
  } catch (std::exception const& e) {
    fail("getOutputShapes", e.what());
    return -1;
  } catch (...) {
    return -1;
  }
}

bool FusedOpPlugin::supportsFormatCombination(int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
                                              int32_t nbOutputs) noexcept {
  if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs || !countOk(nbInputs)) return false;
  PluginTensorDesc const& d = inOut[pos].desc;
  if (d.format != TensorFormat::kLINEAR) return false;
  DataType const xType = inOut[0].desc.type;
  int32_t const firstParam = numDataTypedInputs();
  if (pos == 0) return isSupportedFloat(d.type);
  if (pos < firstParam) return d.type == xType;                                   // W
  if (pos == firstParam) return d.type == DataType::kFLOAT || d.type == xType;    // first parameter sets the type
  if (pos < nbInputs) return d.type == inOut[firstParam].desc.type;               // all parameters share it
  return d.type == xType;                                                         // Y
}

int32_t FusedOpPlugin::configurePlugin(DynamicPluginTensorDesc const* in, int32_t nbInputs,
                                       DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept {
  try {
    std::string err;
    if (in == nullptr || out == nullptr || !checkCounts(nbInputs, nbOutputs, err)) {
      fail("configurePlugin", err.empty() ? "null tensor descriptions" : err);
      return -1;
    }
    // The kernels must accept both ends of the optimisation profile.
    std::vector<Dims> lo(nbInputs), hi(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i) {
      lo[i] = in[i].min;
      hi[i] = in[i].max;
    }
    DataType const xType = in[0].desc.type;
    DataType const pType = in[numDataTypedInputs()].desc.type;
    RunDesc desc;
    if (!checkedDesc(hi.data(), nbInputs, xType, pType, desc, err)) {
      fail("configurePlugin", "at the profile's max shapes: " + err);
      return -1;
    }
    if (volume(lo[0]) > 0 && !checkedDesc(lo.data(), nbInputs, xType, pType, desc, err)) {
      fail("configurePlugin", "at the profile's min shapes: " + err);
      return -1;
    }
    rememberInputCount(nbInputs);  // serialised: the runtime phase's enqueue is told no count
    // What getWorkspaceSize will report for these ranges; serialised so enqueue knows the real buffer size.
    mCfg.workspaceBytes = static_cast<int64_t>(profileWorkspace(in, nbInputs));
    return 0;
  } catch (std::exception const& e) {
    fail("configurePlugin", e.what());
    return -1;
  } catch (...) {
    return -1;
  }
}


bool FusedOpPlugin::runtimeDesc(PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out,
                                RunDesc& desc, std::string& err) const {
  int32_t const firstParam = numDataTypedInputs();
  DataType const xType = in[0].type;
  // TensorRT passes what supportsFormatCombination accepted; anything else would make the kernels misread memory.
  for (int32_t i = 0; i < nbInputs; ++i) {
    DataType const t = in[i].type;
    bool const ok = i == 0            ? isSupportedFloat(t)
                    : i < firstParam  ? t == xType
                    : i == firstParam ? (t == DataType::kFLOAT || t == xType)
                                      : t == in[firstParam].type;
    if (!ok || in[i].format != TensorFormat::kLINEAR) {
      err = givenName(i, nbInputs) + " is " + typeName(t) +
            (in[i].format != TensorFormat::kLINEAR ? " (not LINEAR)" : "") +
            ", which no negotiated combination allows (X is " + typeName(xType) + ")";
      return false;
    }
  }
  if (out->type != xType || out->format != TensorFormat::kLINEAR) {
    err = std::string("Y is ") + typeName(out->type) + ", expected X's type " + typeName(xType) + " in LINEAR format";
    return false;
  }
  std::vector<Dims> dims(nbInputs);
  for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].dims;
  int64_t expected = -1;
  if (!checkedDesc(dims.data(), nbInputs, xType, in[firstParam].type, desc, err, &expected)) return false;
  if (volume(out->dims) != expected) {
    err = "Y has shape " + dimsText(out->dims) + ", expected " + std::to_string(expected) + " elements";
    return false;
  }
  size_t const need = fusedops_workspace_size(&desc);
  if (mCfg.workspaceBytes >= 0 && need > static_cast<uint64_t>(mCfg.workspaceBytes)) {
    err = "these shapes need " + std::to_string(need) + " bytes of workspace but the engine reserved " +
          std::to_string(mCfg.workspaceBytes) + " (shapes outside the optimisation profile?)";
    return false;
  }
  return true;
}

bool FusedOpPlugin::planFor(PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out,
                            std::string& err) {
  auto const same = [](PluginTensorDesc const& a, PluginTensorDesc const& b) {
    return a.type == b.type && a.format == b.format && a.dims.nbDims == b.dims.nbDims &&
           std::equal(a.dims.d, a.dims.d + a.dims.nbDims, b.dims.d);
  };
  if (mPlan && mPlan->descs.size() == static_cast<size_t>(nbInputs) + 1) {
    bool match = same(mPlan->descs.back(), *out);
    for (int32_t i = 0; i < nbInputs && match; ++i) match = same(mPlan->descs[static_cast<size_t>(i)], in[i]);
    if (match) return true;
  }
  RunDesc desc;
  if (!runtimeDesc(in, nbInputs, out, desc, err)) return false;
  auto holder = std::make_shared<PlanHolder>();
  holder->descs.assign(in, in + nbInputs);
  holder->descs.push_back(*out);
  char msg[kErrLen] = {0};
  int const rc = fusedops_plan_create(&desc, FUSEDOPS_DEVICE_CURRENT, nullptr, &holder->plan, msg, sizeof msg);
  if (rc != FUSEDOPS_OK) {
    err = msg;
    return false;
  }
  mPlan = std::move(holder);
  return true;
}

int32_t FusedOpPlugin::onShapeChange(PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out,
                                     int32_t nbOutputs) noexcept {
  try {
    std::string err;
    if (in == nullptr || out == nullptr || !checkCounts(nbInputs, nbOutputs, err)) {
      fail("onShapeChange", err.empty() ? "null tensor descriptions" : err);
      return -1;
    }
    rememberInputCount(nbInputs);  // for enqueue, which is told no count
    // The plan for these shapes: everything a run needs is decided here, so enqueue only enqueues. A build without
    // CUDA kernels (the build-phase library) can only validate; its enqueue reports that.
    if (!fusedops_has_cuda()) {
      RunDesc desc;
      if (!runtimeDesc(in, nbInputs, out, desc, err)) {
        fail("onShapeChange", err);
        return -1;
      }
      return 0;
    }
    if (!planFor(in, nbInputs, out, err)) {
      fail("onShapeChange", err);
      return -1;
    }
    return 0;
  } catch (std::exception const& e) {
    fail("onShapeChange", e.what());
    return -1;
  } catch (...) {
    return -1;
  }
}

int32_t FusedOpPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
                               void const* const* inputs, void* const* outputs, void* workspace,
                               cudaStream_t stream) noexcept {
  try {
    if (inputDesc == nullptr || outputDesc == nullptr || inputs == nullptr || outputs == nullptr) {
      fail("enqueue", "null tensor descriptions or pointers");
      return -1;
    }
    // TensorRT's input count: the node's, less an absent B (known from configurePlugin's serialised has_bias or
    // from onShapeChange).
    int32_t const nbInputs = runtimeInputCount();
    if (nbInputs < 0) {
      fail("enqueue", "the number of inputs is unknown (no has_bias field, and onShapeChange has not run)");
      return -1;
    }
    void const* nodeInputs[5 + FUSEDOPS_MAX_EXTRAS] = {};
    static_assert(FUSEDOPS_CONVTRANSPOSE_GROUPNORM_ACT_NUM_INPUTS == 5, "node inputs: X, W, B, gamma, beta, extras");
    if (mCfg.numInputs() > static_cast<int32_t>(sizeof nodeInputs / sizeof nodeInputs[0])) {
      fail("enqueue", "more inputs than the library takes");
      return -1;
    }
    // The plan onShapeChange made (made here only if TensorRT skipped it for these shapes).
    std::string err;
    if (!planFor(inputDesc, nbInputs, outputDesc, err)) {
      fail("enqueue", err);
      return -1;
    }
    for (int32_t g = 0; g < nbInputs; ++g) nodeInputs[nodeIndex(g, nbInputs)] = inputs[g];  // absent B: null
    size_t const need = fusedops_plan_workspace_size(mPlan->plan);
    // The size TensorRT actually allocated, so the library's own workspace check stays meaningful. Fields without
    // workspace_bytes (an engine from an older plugin build) leave only the need to pass.
    size_t const wsBytes = mCfg.workspaceBytes >= 0 ? static_cast<size_t>(mCfg.workspaceBytes) : need;
    char msg[kErrLen] = {0};
    int32_t const rc = fusedops_plan_run(mPlan->plan, nodeInputs, mCfg.numInputs(), outputs[0], workspace, wsBytes,
                                         reinterpret_cast<fusedops_stream_t>(stream), msg, sizeof msg);
    if (rc != FUSEDOPS_OK) {
      fail("enqueue", std::string(msg[0] ? msg : "kernel launch failed") + " (status " + std::to_string(rc) + ")");
      return -1;
    }
    return 0;
  } catch (std::exception const& e) {
    fail("enqueue", e.what());
    return -1;
  } catch (...) {
    return -1;
  }
}

IPluginV3* FusedOpPlugin::attachToContext(nvinfer1::IPluginResourceContext* /*context*/) noexcept {
  // Each execution context gets its own clone and makes its own plans (cuBLASLt handles are per device inside the
  // kernel library).
  return clone();
}

PluginFieldCollection const* FusedOpPlugin::getFieldsToSerialize() noexcept {
  try {
    return mSerialized.build(mCfg);
  } catch (...) {
    fail("getFieldsToSerialize", "out of memory");
    return nullptr;
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Creator
// ---------------------------------------------------------------------------------------------------------------------
FusedOpCreator::FusedOpCreator(OpKind kind) : mKind(kind), mFields(advertisedFields(kind)) {
  mFieldNames.nbFields = static_cast<int32_t>(mFields.size());
  mFieldNames.fields = mFields.data();
}

IPluginV3* FusedOpCreator::createPlugin(nvinfer1::AsciiChar const* /*name*/, PluginFieldCollection const* fc,
                                        nvinfer1::TensorRTPhase /*phase*/) noexcept {
  try {
    // Both phases read the same field set (getFieldsToSerialize writes the attribute fields back).
    OpConfig cfg;
    std::string err;
    if (!parseFields(mKind, fc, cfg, err)) {
      logError(err);
      return nullptr;
    }
    switch (mKind) {
      case OpKind::kGroupNormAct: return new GroupNormActPlugin(std::move(cfg));
      case OpKind::kGemmGroupNormAct: return new GemmGroupNormActPlugin(std::move(cfg));
      case OpKind::kConvTransposeGroupNormAct: return new ConvTransposeGroupNormActPlugin(std::move(cfg));
    }
    return nullptr;
  } catch (std::exception const& e) {
    logError(std::string(opName(mKind)) + "::createPlugin: " + e.what());
    return nullptr;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace fusedops::trt
