#include "fusedops_trt_common.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

namespace fusedops::trt {

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::ILogger;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;

// ---------------------------------------------------------------------------------------------------------------------
// Logging
// ---------------------------------------------------------------------------------------------------------------------
namespace {
std::mutex gLoggerMutex;
nvinfer1::ILoggerFinder* gLoggerFinder = nullptr;
}  // namespace

void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept {
  std::lock_guard<std::mutex> lock(gLoggerMutex);
  // TensorRT may call this once per registry that loads the library; the first finder stays (as TensorRT's own).
  if (gLoggerFinder == nullptr && finder != nullptr) gLoggerFinder = finder;
}

void logMessage(ILogger::Severity severity, std::string const& message) noexcept {
  try {
    ILogger* logger = nullptr;
    {
      std::lock_guard<std::mutex> lock(gLoggerMutex);
      // findLogger must be called on the thread of the plugin call; we are on it.
      if (gLoggerFinder != nullptr) logger = gLoggerFinder->findLogger();
    }
    std::string const text = "[fusedops] " + message;
    if (logger != nullptr) {
      logger->log(severity, text.c_str());
    } else if (severity <= ILogger::Severity::kWARNING) {
      std::fprintf(stderr, "%s\n", text.c_str());  // no TensorRT logger yet: errors must not vanish
    }
  } catch (...) {
  }
}

char const* opName(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::kGroupNormAct: return "GroupNormAct";
    case OpKind::kGemmGroupNormAct: return "GemmGroupNormAct";
    case OpKind::kConvTransposeGroupNormAct: return "ConvTransposeGroupNormAct";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------------------------------
// Fields
// ---------------------------------------------------------------------------------------------------------------------
namespace {

constexpr int32_t kMaxStringField = 4096;  // a chain of FUSEDOPS_MAX_STEPS steps is far shorter; guards corrupt lengths
constexpr int32_t kMaxIntsField = 64;      // ConvTranspose's lists hold 1-4 values (the library names a wrong count)

char const* fieldTypeName(PluginFieldType t) {
  switch (t) {
    case PluginFieldType::kFLOAT16: return "FLOAT16";
    case PluginFieldType::kFLOAT32: return "FLOAT32";
    case PluginFieldType::kFLOAT64: return "FLOAT64";
    case PluginFieldType::kINT8: return "INT8";
    case PluginFieldType::kINT16: return "INT16";
    case PluginFieldType::kINT32: return "INT32";
    case PluginFieldType::kINT64: return "INT64";
    case PluginFieldType::kCHAR: return "CHAR";
    case PluginFieldType::kDIMS: return "DIMS";
    case PluginFieldType::kBF16: return "BF16";
    default: return "UNKNOWN";
  }
}

bool readInt(PluginField const& f, int64_t& out, std::string& err) {
  if (f.length != 1) {
    err = std::string("field '") + f.name + "' must hold exactly 1 integer, got length " + std::to_string(f.length);
    return false;
  }
  if (f.data == nullptr) {
    err = std::string("field '") + f.name + "' has no data";
    return false;
  }
  switch (f.type) {
    case PluginFieldType::kINT32: { int32_t v; std::memcpy(&v, f.data, sizeof v); out = v; return true; }
    case PluginFieldType::kINT64: { int64_t v; std::memcpy(&v, f.data, sizeof v); out = v; return true; }
    case PluginFieldType::kINT16: { int16_t v; std::memcpy(&v, f.data, sizeof v); out = v; return true; }
    case PluginFieldType::kINT8: { int8_t v; std::memcpy(&v, f.data, sizeof v); out = v; return true; }
    default:
      err = std::string("field '") + f.name + "' must be an integer (INT32), got type " + fieldTypeName(f.type);
      return false;
  }
}

// An INTS attribute (the ONNX parser passes INT32; serialised engines INT64); length 0 is the empty list.
// A list or string field: its length within [0, max], its data present when it has any.
bool checkLength(PluginField const& f, int32_t max, char const* what, std::string& err) {
  if (f.length < 0 || f.length > max) {
    err = std::string("field '") + f.name + "' has an invalid " + what + " length " + std::to_string(f.length);
    return false;
  }
  if (f.length > 0 && f.data == nullptr) {
    err = std::string("field '") + f.name + "' has no data";
    return false;
  }
  return true;
}

bool readInts(PluginField const& f, std::vector<int64_t>& out, std::string& err) {
  size_t size = 0;
  switch (f.type) {
    case PluginFieldType::kINT32: size = 4; break;
    case PluginFieldType::kINT64: size = 8; break;
    case PluginFieldType::kINT16: size = 2; break;
    case PluginFieldType::kINT8: size = 1; break;
    default:
      err = std::string("field '") + f.name + "' must be a list of integers (INT32), got type " + fieldTypeName(f.type);
      return false;
  }
  if (!checkLength(f, kMaxIntsField, "list", err)) return false;
  out.clear();
  auto const* p = static_cast<unsigned char const*>(f.data);
  for (int32_t i = 0; i < f.length; ++i, p += size) {
    if (size == 8) { int64_t v; std::memcpy(&v, p, 8); out.push_back(v); }
    else if (size == 4) { int32_t v; std::memcpy(&v, p, 4); out.push_back(v); }
    else if (size == 2) { int16_t v; std::memcpy(&v, p, 2); out.push_back(v); }
    else { int8_t v; std::memcpy(&v, p, 1); out.push_back(v); }
  }
  return true;
}

bool readFloat(PluginField const& f, double& out, std::string& err) {
  if (f.length != 1) {
    err = std::string("field '") + f.name + "' must hold exactly 1 float, got length " + std::to_string(f.length);
    return false;
  }
  if (f.data == nullptr) {
    err = std::string("field '") + f.name + "' has no data";
    return false;
  }
  switch (f.type) {
    case PluginFieldType::kFLOAT32: { float v; std::memcpy(&v, f.data, sizeof v); out = v; return true; }
    case PluginFieldType::kFLOAT64: { double v; std::memcpy(&v, f.data, sizeof v); out = v; return true; }
    default:
      err = std::string("field '") + f.name + "' must be a float (FLOAT32), got type " + fieldTypeName(f.type);
      return false;
  }
}

bool readString(PluginField const& f, std::string& out, std::string& err) {
  if (f.type != PluginFieldType::kCHAR) {
    err = std::string("field '") + f.name + "' must be a string (CHAR), got type " + fieldTypeName(f.type);
    return false;
  }
  if (!checkLength(f, kMaxStringField, "string", err)) return false;
  char const* p = static_cast<char const*>(f.data);
  // The ONNX parser passes the bytes without a NUL; getFieldsToSerialize and some users include one.
  size_t n = f.length > 0 ? ::strnlen(p, static_cast<size_t>(f.length)) : 0;
  out.assign(p == nullptr ? "" : p, n);
  return true;
}

// The attributes of an op as the op spec lists them, with the field type TensorRT's ONNX parser gives each.
struct SpecField {
  char const* name;
  PluginFieldType type;
  bool plugin;  // role PLUGIN: TensorRT's plugin selection, no meaning for the kernels
  bool list;    // INTS
};
constexpr PluginFieldType kFieldINT = PluginFieldType::kINT32;
constexpr PluginFieldType kFieldINTS = PluginFieldType::kINT32;
constexpr PluginFieldType kFieldFLOAT = PluginFieldType::kFLOAT32;
constexpr PluginFieldType kFieldSTRING = PluginFieldType::kCHAR;
constexpr bool kRoleKERNEL = false;
constexpr bool kRolePLUGIN = true;

std::vector<SpecField> specFields(OpKind kind) {
  std::vector<SpecField> out;
#define FUSEDOPS_TRT_FIELD(NAME, TYPE, ROLE, REQUIRED, FIXED, DEFAULT) \
  out.push_back({#NAME, kField##TYPE, kRole##ROLE, std::strcmp(#TYPE, "INTS") == 0});
  if (kind == OpKind::kGemmGroupNormAct) {
    FUSEDOPS_GEMM_GROUPNORM_ACT_ATTRIBUTES(FUSEDOPS_TRT_FIELD)
  } else if (kind == OpKind::kConvTransposeGroupNormAct) {
    FUSEDOPS_CONVTRANSPOSE_GROUPNORM_ACT_ATTRIBUTES(FUSEDOPS_TRT_FIELD)
  } else {
    FUSEDOPS_GROUPNORM_ACT_ATTRIBUTES(FUSEDOPS_TRT_FIELD)
  }
#undef FUSEDOPS_TRT_FIELD
  return out;
}

bool isSpecField(OpKind kind, std::string const& name) {
  for (SpecField const& s : specFields(kind))
    if (name == s.name) return true;
  return false;
}

}  // namespace

bool parseFields(OpKind kind, PluginFieldCollection const* fc, OpConfig& out, std::string& err) noexcept {
  try {
    err.clear();
    OpConfig cfg;
    cfg.kind = kind;
    std::string const op = opName(kind);
    bool const gemm = kind == OpKind::kGemmGroupNormAct;
    bool const convt = kind == OpKind::kConvTransposeGroupNormAct;
    if (fc == nullptr) {
      err = op + ": no field collection";
      return false;
    }
    if (fc->nbFields < 0 || (fc->nbFields > 0 && fc->fields == nullptr)) {
      err = op + ": corrupt field collection (nbFields=" + std::to_string(fc->nbFields) + ")";
      return false;
    }
    std::set<std::string> seen;
    bool haveGroups = false;
    for (int32_t i = 0; i < fc->nbFields; ++i) {
      PluginField const& f = fc->fields[i];
      if (f.name == nullptr) {
        err = op + ": field " + std::to_string(i) + " has no name";
        return false;
      }
      std::string const name = f.name;
      if (!seen.insert(name).second) {
        err = op + ": field '" + name + "' given twice";
        return false;
      }
      int64_t iv = 0;
      double fv = 0.0;
      // workspace_bytes and has_bias: ours, set by configurePlugin (never from the ONNX parser)
      if (!isSpecField(kind, name) && name != "workspace_bytes" && !(convt && name == "has_bias")) {
        err = "unknown field '" + name + "'";
        break;
      }
      if (name == "num_groups") {
        if (!readInt(f, iv, err)) break;
        if (iv <= 0 || iv > INT32_MAX) {
          err = "num_groups must be positive, got " + std::to_string(iv);
          break;
        }
        cfg.numGroups = static_cast<int32_t>(iv);
        haveGroups = true;
      } else if (name == "epsilon") {
        if (!readFloat(f, fv, err)) break;
        if (!(fv >= 0.0) || !std::isfinite(fv)) {
          err = "epsilon must be a finite non-negative number, got " + std::to_string(fv);
          break;
        }
        cfg.epsilon = static_cast<float>(fv);
      } else if (name == "pre" || name == "post" || name == "reduce") {
        std::string s;
        if (!readString(f, s, err)) break;
        (name == "pre" ? cfg.preText : name == "post" ? cfg.postText : cfg.reduceText) = s;
      } else if (name == "trans_b" || name == "allow_tf32") {
        if (!readInt(f, iv, err)) break;
        if (iv != 0 && iv != 1) {
          err = name + " must be 0 or 1, got " + std::to_string(iv);
          break;
        }
        (name == "trans_b" ? cfg.transB : cfg.allowTf32) = static_cast<int32_t>(iv);
      } else if (name == "kernel_shape" || name == "strides" || name == "pads" || name == "output_padding" ||
                 name == "dilations") {
        ConvFields& c = cfg.conv;
        if (!readInts(f, name == "kernel_shape" ? c.kernelShape : name == "strides" ? c.strides
                         : name == "pads" ? c.pads : name == "output_padding" ? c.outputPadding : c.dilations,
                      err))
          break;
      } else if (name == "group") {
        if (!readInt(f, cfg.conv.group, err)) break;  // its range: the library's check names 'group'
      } else if (name == "has_bias") {
        if (!readInt(f, iv, err)) break;
        if (iv != 0 && iv != 1) {
          err = "has_bias must be 0 or 1, got " + std::to_string(iv);
          break;
        }
        cfg.biasInput = static_cast<int32_t>(iv);
      } else if (name == "workspace_bytes") {
        if (!readInt(f, iv, err)) break;
        if (iv < 0) {
          err = "workspace_bytes must be >= 0, got " + std::to_string(iv);
          break;
        }
        cfg.workspaceBytes = iv;
      } else {
        // plugin_namespace, plugin_version: the ONNX parser picks the plugin by them; no meaning for the kernels.
      }
    }
    if (!err.empty()) {
      err = op + ": " + err;
      return false;
    }
    if (!haveGroups) {
      err = op + ": field 'num_groups' is required";
      return false;
    }
    // The kernel library parses and validates the values (the same rules every adapter applies).
    fusedops_attributes a{};
    a.op = gemm ? FUSEDOPS_OP_GEMM_GROUPNORM_ACT : convt ? FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT
                                                         : FUSEDOPS_OP_GROUPNORM_ACT;
    a.num_groups = cfg.numGroups;
    a.epsilon = cfg.epsilon;
    a.pre = cfg.preText.c_str();
    a.post = cfg.postText.c_str();
    a.reduce = cfg.reduceText.c_str();
    a.trans_b = cfg.transB;
    a.allow_tf32 = cfg.allowTf32;
    ConvFields const& c = cfg.conv;
    auto const count = [](std::vector<int64_t> const& v) { return static_cast<int32_t>(v.size()); };
    fusedops_conv_attributes conv{c.kernelShape.data(), count(c.kernelShape), c.strides.data(), count(c.strides),
                                  c.pads.data(), count(c.pads), c.outputPadding.data(), count(c.outputPadding),
                                  c.dilations.data(), count(c.dilations), c.group};
    if (convt) a.conv = &conv;
    char msg[1024] = {0};
    if (fusedops_parse_attributes(&a, &cfg.tmpl, msg, sizeof msg) != FUSEDOPS_OK) {
      err = msg;  // begins with the op's name
      return false;
    }
    cfg.numExtras = fusedops_num_extras(&cfg.tmpl.d.gn.pre, &cfg.tmpl.d.gn.post);
    out = std::move(cfg);
    return true;
  } catch (std::exception const& e) {
    err = std::string(opName(kind)) + ": " + e.what();
    return false;
  } catch (...) {
    err = std::string(opName(kind)) + ": unexpected error while reading fields";
    return false;
  }
}

std::vector<PluginField> advertisedFields(OpKind kind) {
  // The op's attributes from the op spec (fusedops_spec.h): the kernel's first, then the two TensorRT's ONNX parser
  // picks the plugin by. INT fields are advertised as INT32 (what the parser passes), STRING as CHAR.
  std::vector<PluginField> f;
  for (bool const plugin : {false, true}) {
    for (SpecField const& s : specFields(kind))
      if (s.plugin == plugin)
        f.emplace_back(s.name, nullptr, s.type, s.type == PluginFieldType::kCHAR || s.list ? 0 : 1);
  }
  return f;
}

PluginFieldCollection const* SerializedFields::build(OpConfig const& cfg) {
  mCfg = cfg;  // stable storage for the data pointers below
  mFields.clear();
  mFields.emplace_back("num_groups", &mCfg.numGroups, PluginFieldType::kINT32, 1);
  mFields.emplace_back("epsilon", &mCfg.epsilon, PluginFieldType::kFLOAT32, 1);
  // Strings without their NUL, exactly as the ONNX parser passes attributes.
  mFields.emplace_back("pre", mCfg.preText.c_str(), PluginFieldType::kCHAR, static_cast<int32_t>(mCfg.preText.size()));
  mFields.emplace_back("post", mCfg.postText.c_str(), PluginFieldType::kCHAR,
                       static_cast<int32_t>(mCfg.postText.size()));
  mFields.emplace_back("reduce", mCfg.reduceText.c_str(), PluginFieldType::kCHAR,
                       static_cast<int32_t>(mCfg.reduceText.size()));
  if (mCfg.kind == OpKind::kGemmGroupNormAct) mFields.emplace_back("trans_b", &mCfg.transB, PluginFieldType::kINT32, 1);
  if (mCfg.kind != OpKind::kGroupNormAct)
    mFields.emplace_back("allow_tf32", &mCfg.allowTf32, PluginFieldType::kINT32, 1);
  if (mCfg.kind == OpKind::kConvTransposeGroupNormAct) {
    ConvFields const& c = mCfg.conv;
    // Lists as given (INT64 keeps every value exact); an empty one is left out, which means the same default.
    for (auto const& [name, v] : {std::pair<char const*, std::vector<int64_t> const*>{"kernel_shape", &c.kernelShape},
                                  {"strides", &c.strides}, {"pads", &c.pads}, {"output_padding", &c.outputPadding},
                                  {"dilations", &c.dilations}})
      if (!v->empty()) mFields.emplace_back(name, v->data(), PluginFieldType::kINT64, static_cast<int32_t>(v->size()));
    mFields.emplace_back("group", &c.group, PluginFieldType::kINT64, 1);
    if (mCfg.biasInput >= 0) mFields.emplace_back("has_bias", &mCfg.biasInput, PluginFieldType::kINT32, 1);
  }
  if (mCfg.workspaceBytes >= 0)
    mFields.emplace_back("workspace_bytes", &mCfg.workspaceBytes, PluginFieldType::kINT64, 1);
  mCollection.nbFields = static_cast<int32_t>(mFields.size());
  mCollection.fields = mFields.data();
  return &mCollection;
}

// ---------------------------------------------------------------------------------------------------------------------
// Types and shapes
// ---------------------------------------------------------------------------------------------------------------------
bool isSupportedFloat(DataType t) noexcept {
  return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16;
}

int32_t toFusedopsDtype(DataType t) noexcept {
  switch (t) {
    case DataType::kFLOAT: return FUSEDOPS_F32;
    case DataType::kHALF: return FUSEDOPS_F16;
    case DataType::kBF16: return FUSEDOPS_BF16;
    default: return -1;
  }
}

int64_t volume(Dims const& d, int32_t begin, int32_t end) noexcept {
  if (end < 0) end = d.nbDims;
  int64_t v = 1;
  for (int32_t i = begin; i < end; ++i) v *= d.d[i];
  return v;
}

std::string dimsText(Dims const& d) {
  std::ostringstream s;
  s << "(";
  for (int32_t i = 0; i < d.nbDims; ++i) s << (i ? ", " : "") << d.d[i];
  s << ")";
  return s.str();
}

}  // namespace fusedops::trt
