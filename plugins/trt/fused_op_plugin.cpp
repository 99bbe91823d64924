// What both fused-op plugins share: capability routing, type/format negotiation, configure/workspace/enqueue flow.
#include "fused_op_plugin.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
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

// Values probed for one dim over [lo, hi]: all of them when there are at most `cap`; otherwise the low end densely
// (where the kernels' block-splitting makes the need non-monotone), then geometric steps up to hi.
std::vector<int64_t> probeValues(int64_t lo, int64_t hi, int64_t cap) {
  std::vector<int64_t> v;
  if (hi - lo < cap) {
    for (int64_t x = lo; x <= hi; ++x) v.push_back(x);
    return v;
  }
  int64_t const dense = std::max<int64_t>(cap / 2, 1);
  for (int64_t x = lo; x < lo + dense; ++x) v.push_back(x);
  int64_t const steps = std::max<int64_t>(cap - dense - 1, 1);
  double const start = static_cast<double>(std::max<int64_t>(lo + dense, 1));
  double const ratio = std::pow(static_cast<double>(hi) / start, 1.0 / static_cast<double>(steps));
  double x = start;
  for (int64_t s = 0; s < steps; ++s) {
    x *= ratio;
    int64_t const xi = std::llround(x);
    if (xi > v.back() && xi < hi) v.push_back(xi);
  }
  v.push_back(hi);
  return v;
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

size_t FusedOpPlugin::profileWorkspace(DynamicPluginTensorDesc const* in, int32_t nbInputs) const {
  DataType const xType = in[0].desc.type;
  DataType const pType = in[numDataTypedInputs()].desc.type;
  struct Axis {
    int32_t input, dim;
    std::vector<int64_t> values;
  };
  std::vector<Axis> axes;
  double combos = 1.0;
  for (int32_t i = 0; i < nbInputs; ++i)
    for (int32_t k = 0; k < in[i].max.nbDims; ++k)
      if (in[i].min.d[k] != in[i].max.d[k]) {
        axes.push_back({i, k, {}});
        combos *= static_cast<double>(in[i].max.d[k] - in[i].min.d[k] + 1);
      }
  bool const exhaustive = combos <= static_cast<double>(kMaxWorkspaceProbes);
  int64_t const cap = exhaustive ? std::numeric_limits<int64_t>::max()
                                 : std::max<int64_t>(2, static_cast<int64_t>(std::floor(std::pow(
                                       static_cast<double>(kMaxWorkspaceProbes), 1.0 / axes.size()))));
  for (auto& a : axes)
    a.values = probeValues(std::max<int64_t>(in[a.input].min.d[a.dim], 0), in[a.input].max.d[a.dim], cap);
  std::vector<Dims> dims(nbInputs);
  for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].max;
  std::vector<size_t> idx(axes.size(), 0);
  size_t bytes = 0;
  std::string err;
  RunDesc desc;
  for (;;) {
    for (size_t a = 0; a < axes.size(); ++a) dims[axes[a].input].d[axes[a].dim] = axes[a].values[idx[a]];
    // Combinations the kernels refuse (e.g. X's C against gamma's) cannot occur at runtime: skipped.
    if (volume(dims[0]) > 0 && checkedDesc(dims.data(), xType, pType, desc, err))
      bytes = std::max(bytes, workspaceSize(desc));
    size_t a = 0;
    for (; a < axes.size(); ++a) {
      if (++idx[a] < axes[a].values.size()) break;
      idx[a] = 0;
    }
    if (a == axes.size()) break;
  }
  return bytes;
}

size_t FusedOpPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
                                       DynamicPluginTensorDesc const* /*outputs*/, int32_t nbOutputs) const noexcept {
  try {
    std::string err;
    if (inputs == nullptr || !checkCounts(nbInputs, nbOutputs, err)) return 0;
    return profileWorkspace(inputs, nbInputs);
  } catch (...) {
    return 0;
  }
}

bool FusedOpPlugin::runtimeDesc(PluginTensorDesc const* in, PluginTensorDesc const* out, RunDesc& desc,
                                std::string& err) const {
  int32_t const nbInputs = mCfg.numInputs();
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
      err = inputName(i) + " is " + typeName(t) + (in[i].format != TensorFormat::kLINEAR ? " (not LINEAR)" : "") +
            ", which no negotiated combination allows (X is " + typeName(xType) + ")";
      return false;
    }
  }
  if (out->type != xType || out->format != TensorFormat::kLINEAR) {
    err = std::string("Y is ") + typeName(out->type) + ", expected X's type " + typeName(xType) + " in LINEAR format";
    return false;
  }
  desc = RunDesc{};
  if (volume(in[0].dims) == 0) return true;  // empty batch: desc.gn.N == 0, nothing to run
  std::vector<Dims> dims(nbInputs);
  for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].dims;
  if (!checkedDesc(dims.data(), xType, in[firstParam].type, desc, err)) return false;
  int64_t const expected = desc.gn.N * (mCfg.reduce != FUSEDOPS_REDUCE_NONE ? 1 : desc.gn.C) * desc.gn.S;
  if (volume(out->dims) != expected) {
    err = "Y has shape " + dimsText(out->dims) + ", expected " + std::to_string(expected) + " elements";
    return false;
  }
  size_t const need = workspaceSize(desc);
  if (mCfg.workspaceBytes >= 0 && need > static_cast<uint64_t>(mCfg.workspaceBytes)) {
    err = "these shapes need " + std::to_string(need) + " bytes of workspace but the engine reserved " +
          std::to_string(mCfg.workspaceBytes) + " (shapes outside the optimisation profile?)";
    return false;
  }
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
    RunDesc desc;
    if (!runtimeDesc(in, out, desc, err)) {
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
    // Checked again from the call's own descriptions: no state shared with other contexts or calls.
    RunDesc desc;
    std::string err;
    if (!runtimeDesc(inputDesc, outputDesc, desc, err)) {
      fail("enqueue", err);
      return -1;
    }
    if (desc.gn.N == 0) return 0;
    // The size TensorRT actually allocated, so the kernels' own workspace check stays meaningful. Fields without
    // workspace_bytes (an engine from an older plugin build) leave only the need to pass.
    size_t const wsBytes = mCfg.workspaceBytes >= 0 ? static_cast<size_t>(mCfg.workspaceBytes) : workspaceSize(desc);
    char msg[kErrLen] = {0};
    int32_t const rc = launch(desc, inputs, outputs[0], workspace, wsBytes, stream, msg, sizeof msg);
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
