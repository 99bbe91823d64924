// Shared pieces of the fusedops TensorRT plugins: logging through the ILoggerFinder that TensorRT hands the library,
// the validated field set (= the ONNX node's attributes), and dtype / shape helpers.
#ifndef FUSEDOPS_TRT_COMMON_H_
#define FUSEDOPS_TRT_COMMON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "NvInferRuntime.h"
#include "fusedops/fusedops.h"

namespace fusedops::trt {

inline constexpr char const* kPluginNamespace = "fusedops";
inline constexpr char const* kPluginVersion = "1";

// ---- logging (setLoggerFinder) ----
void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept;
void logMessage(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept;
inline void logError(std::string const& message) noexcept {
  logMessage(nvinfer1::ILogger::Severity::kERROR, message);
}

// ---- fields ----
enum class OpKind : int32_t { kGroupNormAct = 0, kGemmGroupNormAct = 1, kConvTransposeGroupNormAct = 2 };
char const* opName(OpKind kind) noexcept;

// ConvTransposeGroupNormAct's ONNX ConvTranspose attributes as given; an empty list is ONNX's default.
struct ConvFields {
  std::vector<int64_t> kernelShape, strides, pads, outputPadding, dilations;
  int64_t group{1};
};

// The attributes of one fused node as given (serialised back verbatim), validated and parsed once by the kernel
// library into the op descriptor template the shape rules and plans start from.
struct OpConfig {
  OpKind kind{OpKind::kGroupNormAct};
  int32_t numGroups{0};
  float epsilon{1e-5F};
  std::string preText;
  std::string postText;
  std::string reduceText;
  int32_t transB{1};     // GemmGroupNormAct only
  int32_t allowTf32{1};  // GemmGroupNormAct, ConvTransposeGroupNormAct
  ConvFields conv;       // ConvTransposeGroupNormAct only
  // ConvTransposeGroupNormAct's optional B: TensorRT has no absent input, so a node without B has one input fewer
  // (X, W, gamma, beta, extras). 1 = B given, 0 = absent, -1 = not known yet (fields from the ONNX parser): set from
  // the input count by configurePlugin / onShapeChange and serialised (enqueue is told no count).
  int32_t biasInput{-1};
  fusedops_op_desc tmpl{};  // fusedops_parse_attributes of the fields above
  int32_t numExtras{0};
  // Workspace TensorRT reserved for this node (getWorkspaceSize over the profile), set by configurePlugin and
  // serialised, so the runtime phase knows the real buffer size; -1 = unknown (fields from the ONNX parser).
  int64_t workspaceBytes{-1};

  int32_t reduce() const noexcept { return tmpl.d.gn.reduce; }
  // In node order (the C ABI's), B counted.
  int32_t numFixedInputs() const noexcept { return kind == OpKind::kGroupNormAct ? 3 : 5; }
  int32_t numInputs() const noexcept { return numFixedInputs() + numExtras; }
  bool optionalBias() const noexcept { return kind == OpKind::kConvTransposeGroupNormAct; }
};

// Reads a PluginFieldCollection (from the ONNX parser, a user, or getFieldsToSerialize of a serialized engine).
// Accepts INT fields as kINT32 / kINT64 / kINT16 / kINT8, FLOAT as kFLOAT32 / kFLOAT64, STRING as kCHAR (with or
// without a terminating NUL); a scalar field must have exactly one element; INTS fields (ConvTranspose's lists) any
// integer type and 0 (= ONNX's default) or more values. Unknown names, duplicates, wrong types or lengths, bad chains
// and out-of-range values fail with a message naming the field.
bool parseFields(OpKind kind, nvinfer1::PluginFieldCollection const* fc, OpConfig& out, std::string& err) noexcept;

// The field names and types a creator advertises (getFieldNames).
std::vector<nvinfer1::PluginField> advertisedFields(OpKind kind);

// Owns the storage behind a PluginFieldCollection that getFieldsToSerialize returns.
class SerializedFields {
 public:
  nvinfer1::PluginFieldCollection const* build(OpConfig const& cfg);

 private:
  OpConfig mCfg{};
  std::vector<nvinfer1::PluginField> mFields;
  nvinfer1::PluginFieldCollection mCollection{};
};

// ---- types and shapes ----
bool isSupportedFloat(nvinfer1::DataType t) noexcept;
int32_t toFusedopsDtype(nvinfer1::DataType t) noexcept;  // -1 if unsupported
int64_t volume(nvinfer1::Dims const& d, int32_t begin = 0, int32_t end = -1) noexcept;
std::string dimsText(nvinfer1::Dims const& d);

}  // namespace fusedops::trt

#endif  // FUSEDOPS_TRT_COMMON_H_
