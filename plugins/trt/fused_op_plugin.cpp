// What both fused-op plugins share: capability routing, type/format negotiation, configure/workspace/enqueue flow.
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
}

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

bool FusedOpPlugin::checkCounts(int32_t nbInputs, int32_t nbOutputs, std::string& err) const {
  if (nbInputs != mCfg.numInputs()) {
    err = "expected " + std::to_string(mCfg.numInputs()) + " inputs (" + std::to_string(mCfg.numFixedInputs()) +
          " + " + std::to_string(mCfg.numExtras) + " extra inputs referenced by the chains), got " +
          std::to_string(nbInputs);
    return false;
  }
  if (nbOutputs != 1) {
    err = "expected 1 output, got " + std::to_string(nbOutputs);
    return false;
  }
  return true;
}

bool FusedOpPlugin::checkedDesc(Dims const* dims, DataType xType, DataType paramType, RunDesc& desc,
                                std::string& err) const {
  desc = RunDesc{};
  if (!describe(dims, desc, err)) return false;
  desc.gn.x_dtype = toFusedopsDtype(xType);
  desc.gn.param_dtype = toFusedopsDtype(paramType);
  if (desc.gn.x_dtype < 0 || desc.gn.param_dtype < 0) {
    err = "unsupported data type (float32, float16 and bfloat16 are supported)";
    return false;
  }
  char msg[kErrLen] = {0};
  if (check(desc, msg, sizeof msg) != FUSEDOPS_OK) {
    err = msg[0] ? msg : "the kernel library rejected the shapes";
    return false;
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
    if (!inferOutputShape(inputs, outputs[0], exprBuilder, err)) {
      fail("getOutputShapes", err);
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
  if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs || nbInputs != mCfg.numInputs()) return false;
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
    if (!checkedDesc(hi.data(), xType, pType, desc, err)) {
      fail("configurePlugin", "at the profile's max shapes: " + err);
      return -1;
    }
    if (volume(lo[0]) > 0 && !checkedDesc(lo.data(), xType, pType, desc, err)) {
      fail("configurePlugin", "at the profile's min shapes: " + err);
      return -1;
    }
    return 0;
  } catch (std::exception const& e) {
    fail("configurePlugin", e.what());
    return -1;
  } catch (...) {
    return -1;
  }
}

size_t FusedOpPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
                                       DynamicPluginTensorDesc const* /*outputs*/, int32_t nbOutputs) const noexcept {
  try {
    std::string err;
    if (inputs == nullptr || !checkCounts(nbInputs, nbOutputs, err)) return 0;
    DataType const xType = inputs[0].desc.type;
    DataType const pType = inputs[numDataTypedInputs()].desc.type;
    // The largest need over the profile's min, opt and max shapes (enqueue asks again for the actual shapes).
    size_t bytes = 0;
    for (int which = 0; which < 3; ++which) {
      std::vector<Dims> dims(nbInputs);
      for (int32_t i = 0; i < nbInputs; ++i)
        dims[i] = which == 0 ? inputs[i].min : which == 1 ? inputs[i].opt : inputs[i].max;
      RunDesc desc;
      if (volume(dims[0]) > 0 && checkedDesc(dims.data(), xType, pType, desc, err))
        bytes = std::max(bytes, workspaceSize(desc));
    }
    return bytes;
  } catch (...) {
    return 0;
  }
}

int32_t FusedOpPlugin::onShapeChange(PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/,
                                     int32_t nbOutputs) noexcept {
  try {
    std::string err;
    if (in == nullptr || !checkCounts(nbInputs, nbOutputs, err)) {
      fail("onShapeChange", err.empty() ? "null tensor descriptions" : err);
      return -1;
    }
    if (volume(in[0].dims) == 0) return 0;  // empty batch: nothing to check or run
    std::vector<Dims> dims(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].dims;
    RunDesc desc;
    if (!checkedDesc(dims.data(), in[0].type, in[numDataTypedInputs()].type, desc, err)) {
      fail("onShapeChange", err);
      return -1;
    }
    return 0;
  } catch (...) {
    return -1;
  }
}

int32_t FusedOpPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
                               void const* const* inputs, void* const* outputs, void* workspace,
                               cudaStream_t stream) noexcept {
  try {
    int32_t const nbInputs = mCfg.numInputs();
    if (inputDesc == nullptr || inputs == nullptr || outputs == nullptr) {
      fail("enqueue", "null tensor descriptions or pointers");
      return -1;
    }
    if (volume(inputDesc[0].dims) == 0) return 0;
    // Recomputed from the call's own descriptions: no state shared with other contexts or calls.
    Dims dims[FUSEDOPS_MAX_EXTRAS + 5];
    for (int32_t i = 0; i < nbInputs; ++i) dims[i] = inputDesc[i].dims;
    RunDesc desc;
    std::string err;
    if (!checkedDesc(dims, inputDesc[0].type, inputDesc[numDataTypedInputs()].type, desc, err)) {
      fail("enqueue", err);
      return -1;
    }
    // TensorRT allocated getWorkspaceSize() at the profile's worst case; the actual shapes need no more.
    size_t const wsBytes = workspaceSize(desc);
    char msg[kErrLen] = {0};
    int32_t const rc = launch(desc, inputs, outputs[0], workspace, wsBytes, stream, msg, sizeof msg);
    if (rc != FUSEDOPS_OK) {
      fail("enqueue", std::string(msg[0] ? msg : "kernel launch failed") + " (status " + std::to_string(rc) + ")");
      return -1;
    }
    return 0;
  } catch (...) {
    return -1;
  }
}

IPluginV3* FusedOpPlugin::attachToContext(nvinfer1::IPluginResourceContext* /*context*/) noexcept {
  // The kernels keep no per-context state (cuBLASLt handles are per device inside the kernel library).
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
    if (mKind == OpKind::kGroupNormAct) return new GroupNormActPlugin(std::move(cfg));
    return new GemmGroupNormActPlugin(std::move(cfg));
  } catch (std::exception const& e) {
    logError(std::string(opName(mKind)) + "::createPlugin: " + e.what());
    return nullptr;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace fusedops::trt
