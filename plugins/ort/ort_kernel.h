// The ONNX Runtime custom-op library's shared pieces (overview: the comment at the top of fusedops_ort.cc): the op
// configurations, the kernel object with its plans, and what node_info.cc reads from ORT's kernel info (attributes,
// the graph's static input shapes) for kernel creation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cpu_util.h"  // the core's scheduler hook (internal C++, linked statically)
#include "fusedops/fusedops.h"
#include "onnxruntime_c_api.h"
#include "ort_prepared_weights.h"

namespace fusedops_ort {

constexpr uint32_t kOrtApiVersion = 21;
constexpr const char* kDomain = "fusedops";
constexpr const char* kCpuEP = "CPUExecutionProvider";
constexpr const char* kCudaEP = "CUDAExecutionProvider";
constexpr const char* kConfigAllowTf32 = "fusedops.allow_tf32";
constexpr const char* kConfigCpuBlas = "fusedops.cpu_blas";
// ORT's C API tells a custom op neither intra_op_num_threads nor its pool's size, so the session that sets it also
// names it here (fusedops.ort.session() copies SessionOptions.intra_op_num_threads): the CPU kernels size their
// work split for it (one GEMM call at one thread, not tiles that each repack W).
constexpr const char* kConfigIntraOpThreads = "fusedops.intra_op_num_threads";

// One counter each for the whole library (inline: one definition across its translation units).
inline std::atomic<int64_t> g_cpu_calls{0};
inline std::atomic<int64_t> g_cuda_calls{0};
inline std::atomic<int64_t> g_prepared_runs{0};  // CUDA runs that read W's prepared form
inline std::atomic<int64_t> g_parallel_for_calls{0};  // batches handed to ORT's intra-op pool

enum class OpKind { kGroupNormAct, kGemmGroupNormAct, kConvTransposeGroupNormAct };

struct OpConfig {
  OpKind kind;
  ONNXTensorElementDataType x_type;
  ONNXTensorElementDataType param_type;
  bool cuda;
  int allow_tf32_override;  // -1: use the node attribute; 0/1: session config fusedops.allow_tf32
  int threads;              // session config fusedops.intra_op_num_threads; 0: not given (the hardware's count)
};

inline int32_t to_fusedops_dtype(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return FUSEDOPS_F16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return FUSEDOPS_BF16;
    default: return FUSEDOPS_F32;
  }
}

inline const char* op_name(OpKind k) {
  return k == OpKind::kGroupNormAct ? "GroupNormAct"
         : k == OpKind::kGemmGroupNormAct ? "GemmGroupNormAct"
                                          : "ConvTransposeGroupNormAct";
}
inline int32_t op_code(OpKind k) {
  return k == OpKind::kGroupNormAct ? FUSEDOPS_OP_GROUPNORM_ACT
         : k == OpKind::kGemmGroupNormAct ? FUSEDOPS_OP_GEMM_GROUPNORM_ACT
                                          : FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT;
}
// The adapter's kind of an op code; in a constant expression an op this adapter lacks fails to compile (the throw).
constexpr OpKind kind_of(int32_t op) {
  return op == FUSEDOPS_OP_GROUPNORM_ACT                   ? OpKind::kGroupNormAct
         : op == FUSEDOPS_OP_GEMM_GROUPNORM_ACT            ? OpKind::kGemmGroupNormAct
         : op == FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT ? OpKind::kConvTransposeGroupNormAct
                                                           : throw "an op the ORT adapter does not implement";
}
// Inputs before the extras: X, gamma, beta (GroupNormAct) or X, W, B, gamma, beta.
inline size_t fixed_inputs(OpKind k) { return k == OpKind::kGroupNormAct ? 3 : 5; }
// ConvTransposeGroupNormAct's bias B (input 2) may be absent (ONNX: an empty input name), as in the op spec.
inline bool input_optional(OpKind k, size_t i) { return k == OpKind::kConvTransposeGroupNormAct && i == 2; }

#define FUSEDOPS_ORT_CHECK(expr)    \
  do {                              \
    OrtStatus* _st = (expr);        \
    if (_st) return _st;            \
  } while (0)

// One node's plan for one set of input shapes (and, on the CUDA EP, one device).
struct PlanEntry {
  fusedops_plan* plan = nullptr;
  std::vector<int64_t> out_shape;
  size_t workspace = 0;
  size_t prepared_weights = 0;  // bytes of W's prepared form the plan takes (3xTF32), 0: none
  ~PlanEntry() { fusedops_plan_destroy(plan); }
};

// Kernel: attributes parsed once (at session creation) into the op descriptor template; a plan per input shape,
// made on the first run with that shape and kept (concurrent Run()s share the kernel, hence the mutex).
struct Kernel {
  const OrtApi* api;
  OpConfig cfg;
  std::string node;  // node name, for error messages
  fusedops_op_desc tmpl{};
  int32_t num_extras = 0;
  size_t num_fixed_inputs = 0;
  std::mutex mu;
  std::map<std::vector<int64_t>, std::shared_ptr<PlanEntry>> plans;
  // GemmGroupNormAct on the CUDA EP with W a constant initializer: W split once for 3xTF32 plans.
  bool w_constant = false;
  PreparedWeights prepared;

  std::string where() const { return std::string("fusedops ") + op_name(cfg.kind) + " node '" + node + "': "; }
  OrtStatus* error(const std::string& what) const {
    return api->CreateStatus(ORT_INVALID_ARGUMENT, (where() + what).c_str());
  }
  // A library message starts with the op's name, which where() already gives.
  OrtStatus* library_error(int rc, const char* msg) const {
    const std::string prefix = std::string(op_name(cfg.kind)) + ": ";
    if (std::strncmp(msg, prefix.c_str(), prefix.size()) == 0) msg += prefix.size();
    const OrtErrorCode code = rc == FUSEDOPS_ERR_INVALID_ARGUMENT ? ORT_INVALID_ARGUMENT
                              : rc == FUSEDOPS_ERR_UNSUPPORTED    ? ORT_NOT_IMPLEMENTED
                                                                  : ORT_FAIL;
    return api->CreateStatus(code, (where() + msg).c_str());
  }
};

// True when st is null (success); releases st otherwise.
bool ok(const OrtApi* api, OrtStatus* st);

// A node's attributes as the op spec lists them (fusedops_spec.h): a member of the attribute's ONNX type holding
// its default, and whether the node gave it. ORT's C API cannot list a node's attributes, so the spec's list of the
// op is what is read (an unknown attribute is caught where fusedops loads the model, exporter/validate.py).
using AttrINT = int64_t;
using AttrINTS = std::vector<int64_t>;
using AttrFLOAT = float;
using AttrSTRING = std::string;
struct NodeAttributes {
#define FUSEDOPS_ORT_MEMBER(NAME, TYPE, ROLE, REQUIRED, FIXED, DEFAULT) \
  Attr##TYPE NAME{DEFAULT};                                              \
  bool has_##NAME = false;
  FUSEDOPS_ATTRIBUTES(FUSEDOPS_ORT_MEMBER)
#undef FUSEDOPS_ORT_MEMBER
};

// Reads the op's attributes in spec order; a required one that is absent, or a fixed one (plugin_namespace,
// plugin_version) with another value, fails where it is read.
OrtStatus* read_attributes(const Kernel& k, const OrtKernelInfo* info, NodeAttributes* a);
// The node's name, or "?" when ORT cannot say.
std::string node_name(const OrtApi* api, const OrtKernelInfo* info);

// ---- shapes: the library's rules (fusedops_describe), at session creation on what the graph knows, and per new
// input shape at run, where the plan for that shape is made ----
inline ONNXTensorElementDataType input_type(const OpConfig& c, size_t i) {
  const size_t data_typed = c.kind == OpKind::kGroupNormAct ? 1 : 2;  // X (and W) carry X's type
  return i < data_typed ? c.x_type : c.param_type;
}
// Input i as the graph knows it at session creation (rank -1: unknown; an absent optional input: dtype unknown too,
// as fusedops_describe takes it).
fusedops_tensor_desc static_desc(const Kernel& k, const OrtKernelInfo* info, size_t i);

// The node's attributes as fusedops_parse_attributes takes them (ConvTransposeGroupNormAct: *conv gets the INTS
// lists, pointing into `na`, which must outlive it; absent or empty lists are ONNX's defaults). allow_tf32: the
// node's (GemmGroupNormAct, ConvTransposeGroupNormAct) unless the session's fusedops.allow_tf32 overrides it.
OrtStatus* library_attributes(const Kernel& k, const NodeAttributes& na, fusedops_attributes* fa,
                              fusedops_conv_attributes* conv);

}  // namespace fusedops_ort
