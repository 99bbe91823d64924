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
                                std::string& err, int64_t* outputVolume) const {
  int32_t const nbInputs = mCfg.numInputs();
  int32_t const firstParam = numDataTypedInputs();
  std::vector<fusedops_tensor_desc> in(static_cast<size_t>(nbInputs));
  for (int32_t i = 0; i < nbInputs; ++i) {
    fusedops_tensor_desc& t = in[static_cast<size_t>(i)];
    t.dtype = toFusedopsDtype(i < firstParam ? xType : paramType);
    t.rank = dims[i].nbDims;
    if (t.rank > FUSEDOPS_MAX_RANK) {
      err = inputName(i) + " has rank " + std::to_string(t.rank) + "; at most " +
            std::to_string(FUSEDOPS_MAX_RANK) + " is supported";
      return false;
    }
    for (int32_t k = 0; k < t.rank; ++k) t.dims[k] = dims[i].d[k];
  }
  desc = mCfg.tmpl;
  fusedops_tensor_desc y{};
  char msg[kErrLen] = {0};
  if (fusedops_describe(&desc, in.data(), nbInputs, &y, msg, sizeof msg) != FUSEDOPS_OK) {
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
    if (!checkedDesc(known.data(), DataType::kFLOAT, DataType::kFLOAT, desc, err)) {
      fail("getOutputShapes", err);
      return -1;
    }
    outputExprs(inputs, outputs[0], exprBuilder);
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
      bytes = std::max(bytes, fusedops_workspace_size(&desc));
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
  std::vector<Dims> dims(nbInputs);
  for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].dims;
  int64_t expected = -1;
  if (!checkedDesc(dims.data(), xType, in[firstParam].type, desc, err, &expected)) return false;
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

bool FusedOpPlugin::planFor(PluginTensorDesc const* in, PluginTensorDesc const* out, std::string& err) {
  int32_t const nbInputs = mCfg.numInputs();
  auto const same = [](PluginTensorDesc const& a, PluginTensorDesc const& b) {
    return a.type == b.type && a.format == b.format && a.dims.nbDims == b.dims.nbDims &&
           std::equal(a.dims.d, a.dims.d + a.dims.nbDims, b.dims.d);
  };
  if (mPlan) {
    bool match = same(mPlan->descs.back(), *out);
    for (int32_t i = 0; i < nbInputs && match; ++i) match = same(mPlan->descs[static_cast<size_t>(i)], in[i]);
    if (match) return true;
  }
  RunDesc desc;
  if (!runtimeDesc(in, out, desc, err)) return false;
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
    // The plan for these shapes: everything a run needs is decided here, so enqueue only enqueues. A build without
    // CUDA kernels (the build-phase library) can only validate; its enqueue reports that.
    if (!fusedops_has_cuda()) {
      RunDesc desc;
      if (!runtimeDesc(in, out, desc, err)) {
        fail("onShapeChange", err);
        return -1;
      }
      return 0;
    }
    if (!planFor(in, out, err)) {
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
    // The plan onShapeChange made (made here only if TensorRT skipped it for these shapes).
    std::string err;
    if (!planFor(inputDesc, outputDesc, err)) {
      fail("enqueue", err);
      return -1;
    }
    size_t const need = fusedops_plan_workspace_size(mPlan->plan);
    // The size TensorRT actually allocated, so the library's own workspace check stays meaningful. Fields without
    // workspace_bytes (an engine from an older plugin build) leave only the need to pass.
    size_t const wsBytes = mCfg.workspaceBytes >= 0 ? static_cast<size_t>(mCfg.workspaceBytes) : need;
    char msg[kErrLen] = {0};
    int32_t const rc = fusedops_plan_run(mPlan->plan, inputs, mCfg.numInputs(), outputs[0], workspace, wsBytes,
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
