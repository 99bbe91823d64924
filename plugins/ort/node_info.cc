// What ORT's kernel info says about a node, read at kernel creation: its attributes (typed, a wrong type never a
// silent default) and the graph's static shapes of its inputs.
#include <string>
#include <vector>

#include "ort_kernel.h"

namespace fusedops_ort {

// ---- attribute helpers ----
// A missing attribute keeps the caller's default (ORT does not pass function-level defaults to kernels); one that is
// present with another type is an error, never a silent default.
bool ok(const OrtApi* api, OrtStatus* st) {
  if (!st) return true;
  api->ReleaseStatus(st);
  return false;
}

// ORT's typed getters fail with the same code for "absent" and "other type"; probing the other getters tells them
// apart without depending on message text. The array getters do not check the type (any present attribute reads
// as a list, empty unless it is one), so they serve as the presence test for the remaining types. Returns the
// attribute's type for the message, or nullptr when it is absent.
const char* present_type(const OrtApi* api, const OrtKernelInfo* info, const char* name, const std::string& failure) {
  int64_t i = 0;
  float f = 0.f;
  size_t n = 0;
  if (ok(api, api->KernelInfoGetAttribute_int64(info, name, &i))) return "INT";
  if (ok(api, api->KernelInfoGetAttribute_float(info, name, &f))) return "FLOAT";
  if (ok(api, api->KernelInfoGetAttribute_string(info, name, nullptr, &n))) return "STRING";
  n = 0;
  if (ok(api, api->KernelInfoGetAttributeArray_float(info, name, nullptr, &n)) && n > 0) return "FLOATS";
  n = 0;
  const bool present = ok(api, api->KernelInfoGetAttributeArray_int64(info, name, nullptr, &n));
  if (present && n > 0) return "INTS";
  if (present || failure.find("type don't match") != std::string::npos) return "a list or another non-scalar type";
  return nullptr;
}

// Reads `name` into *out when present with `type` (*present = true); absent leaves *out (*present = false).
template <typename Get>
OrtStatus* read_attr(const Kernel& k, const OrtKernelInfo* info, const char* name, const char* type, bool* present,
                     Get get) {
  *present = false;
  OrtStatus* st = get();
  if (!st) {
    *present = true;
    return nullptr;
  }
  const std::string failure = k.api->GetErrorMessage(st);
  k.api->ReleaseStatus(st);
  if (const char* actual = present_type(k.api, info, name, failure))
    return k.error(std::string("attribute '") + name + "' must be " + type + ", got " + actual);
  return nullptr;
}
// One reader per ONNX attribute type, overloaded on the output (the op spec's attribute tables pick by type).
OrtStatus* attr_value(const Kernel& k, const OrtKernelInfo* info, const char* name, int64_t* out, bool* present) {
  bool p = false;
  int64_t v = 0;
  OrtStatus* st =
      read_attr(k, info, name, "INT", &p, [&] { return k.api->KernelInfoGetAttribute_int64(info, name, &v); });
  if (p) *out = v;
  *present = p;
  return st;
}
OrtStatus* attr_value(const Kernel& k, const OrtKernelInfo* info, const char* name, float* out, bool* present) {
  bool p = false;
  float v = 0.f;
  OrtStatus* st =
      read_attr(k, info, name, "FLOAT", &p, [&] { return k.api->KernelInfoGetAttribute_float(info, name, &v); });
  if (p) *out = v;
  *present = p;
  return st;
}
OrtStatus* attr_value(const Kernel& k, const OrtKernelInfo* info, const char* name, std::string* out,
                      bool* present) {
  bool p = false;
  size_t size = 0;
  OrtStatus* st = read_attr(k, info, name, "STRING", &p,
                            [&] { return k.api->KernelInfoGetAttribute_string(info, name, nullptr, &size); });
  *present = p;
  if (st || !p) return st;
  std::string s(size, '\0');
  FUSEDOPS_ORT_CHECK(k.api->KernelInfoGetAttribute_string(info, name, &s[0], &size));
  s.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  // The library reads attributes as C strings: an embedded NUL would silently cut the text there.
  const size_t nul = s.find('\0');
  if (nul != std::string::npos)
    return k.error(std::string("attribute '") + name + "' contains a NUL byte (0x00) at offset " +
                   std::to_string(nul) + "; attribute text must not");
  *out = s;
  return nullptr;
}

// INTS. ORT's array getter does not check the type (any present attribute reads as a list, empty unless it is
// one), so an empty read is probed for a scalar or FLOATS of that name; an empty INTS is ONNX's default, as absent.
OrtStatus* attr_value(const Kernel& k, const OrtKernelInfo* info, const char* name, std::vector<int64_t>* out,
                      bool* present) {
  size_t n = 0;
  *present = false;
  OrtStatus* st = k.api->KernelInfoGetAttributeArray_int64(info, name, nullptr, &n);
  if (st) {  // absent, or (as present_type tells) of a type the getter refuses
    const std::string failure = k.api->GetErrorMessage(st);
    k.api->ReleaseStatus(st);
    const char* actual = present_type(k.api, info, name, failure);
    return actual ? k.error(std::string("attribute '") + name + "' must be INTS, got " + actual) : nullptr;
  }
  if (n == 0) {
    int64_t i = 0;
    float f = 0.f;
    size_t m = 0;
    const char* actual = ok(k.api, k.api->KernelInfoGetAttribute_int64(info, name, &i))     ? "INT"
                         : ok(k.api, k.api->KernelInfoGetAttribute_float(info, name, &f))   ? "FLOAT"
                         : ok(k.api, k.api->KernelInfoGetAttribute_string(info, name, nullptr, &m)) ? "STRING"
                         : (ok(k.api, k.api->KernelInfoGetAttributeArray_float(info, name, nullptr, &m)) && m > 0)
                             ? "FLOATS"
                             : nullptr;
    if (actual) return k.error(std::string("attribute '") + name + "' must be INTS, got " + actual);
    out->clear();
    *present = true;
    return nullptr;
  }
  // The library takes a list's length as int32 (ONNX's lists here have 1-4 values; its parser names a wrong count).
  if (n > 1024) return k.error(std::string("attribute '") + name + "' has " + std::to_string(n) + " values; too many");
  std::vector<int64_t> v(n);
  FUSEDOPS_ORT_CHECK(k.api->KernelInfoGetAttributeArray_int64(info, name, v.data(), &n));
  v.resize(n);
  *out = std::move(v);
  *present = true;
  return nullptr;
}

std::string text_of(const std::string& v) { return v; }
std::string text_of(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
std::string text_of(int64_t v) { return std::to_string(v); }
std::string text_of(float v) { return std::to_string(v); }

// Reads the op's attributes in spec order; a required one that is absent, or a fixed one (plugin_namespace,
// plugin_version) with another value, fails where it is read.
OrtStatus* read_attributes(const Kernel& k, const OrtKernelInfo* info, NodeAttributes* a) {
#define FUSEDOPS_ORT_READ(NAME, TYPE, ROLE, REQUIRED, FIXED, DEFAULT)                                           \
  FUSEDOPS_ORT_CHECK(attr_value(k, info, #NAME, &a->NAME, &a->has_##NAME));                                    \
  if (REQUIRED && !a->has_##NAME) return k.error("attribute '" #NAME "' is required");                         \
  if (FIXED && a->has_##NAME && a->NAME != Attr##TYPE{DEFAULT})                                                \
    return k.error(std::string("attribute '" #NAME "' must be '") + text_of(Attr##TYPE{DEFAULT}) + "', got '" + \
                   text_of(a->NAME) + "'");
  if (k.cfg.kind == OpKind::kGemmGroupNormAct) {
    FUSEDOPS_GEMM_GROUPNORM_ACT_ATTRIBUTES(FUSEDOPS_ORT_READ)
  } else if (k.cfg.kind == OpKind::kConvTransposeGroupNormAct) {
    FUSEDOPS_CONVTRANSPOSE_GROUPNORM_ACT_ATTRIBUTES(FUSEDOPS_ORT_READ)
  } else {
    FUSEDOPS_GROUPNORM_ACT_ATTRIBUTES(FUSEDOPS_ORT_READ)
  }
#undef FUSEDOPS_ORT_READ
  return nullptr;
}

OrtStatus* library_attributes(const Kernel& k, const NodeAttributes& na, fusedops_attributes* fa,
                              fusedops_conv_attributes* conv) {
  *fa = fusedops_attributes{};
  fa->op = op_code(k.cfg.kind);
  fa->num_groups = na.num_groups;
  fa->epsilon = na.epsilon;
  fa->pre = na.pre.c_str();
  fa->post = na.post.c_str();
  fa->reduce = na.reduce.c_str();
  fa->trans_b = 1;
  fa->allow_tf32 = 1;
  if (k.cfg.kind == OpKind::kGroupNormAct) return nullptr;
  // Checked here on the 64-bit values: the library's fields are 32-bit.
  const int64_t tf = na.allow_tf32;
  if (tf != 0 && tf != 1) return k.error("allow_tf32 must be 0 or 1, got " + std::to_string(tf));
  fa->allow_tf32 = k.cfg.allow_tf32_override >= 0 ? k.cfg.allow_tf32_override : static_cast<int32_t>(tf);
  if (k.cfg.kind == OpKind::kGemmGroupNormAct) {
    const int64_t tb = na.trans_b;
    if (tb != 0 && tb != 1) return k.error("trans_b must be 0 or 1, got " + std::to_string(tb));
    fa->trans_b = static_cast<int32_t>(tb);
    return nullptr;
  }
  *conv = fusedops_conv_attributes{};
  conv->kernel_shape = na.kernel_shape.data();
  conv->num_kernel_shape = static_cast<int32_t>(na.kernel_shape.size());
  conv->strides = na.strides.data();
  conv->num_strides = static_cast<int32_t>(na.strides.size());
  conv->pads = na.pads.data();
  conv->num_pads = static_cast<int32_t>(na.pads.size());
  conv->output_padding = na.output_padding.data();
  conv->num_output_padding = static_cast<int32_t>(na.output_padding.size());
  conv->dilations = na.dilations.data();
  conv->num_dilations = static_cast<int32_t>(na.dilations.size());
  conv->group = na.group;  // the library checks the range and names 'group'
  fa->conv = conv;
  return nullptr;
}

std::string node_name(const OrtApi* api, const OrtKernelInfo* info) {
  size_t size = 0;
  OrtStatus* st = api->KernelInfo_GetNodeName(info, nullptr, &size);
  if (st) {
    api->ReleaseStatus(st);
    return "?";
  }
  std::string s(size, '\0');
  st = api->KernelInfo_GetNodeName(info, &s[0], &size);
  if (st) {
    api->ReleaseStatus(st);
    return "?";
  }
  s.resize(size > 0 ? size - 1 : 0);
  return s;
}

// Input i as the graph knows it at session creation. ORT reports an unknown shape as rank 0, so rank 0 counts as
// unknown here (a real scalar is caught at run).
fusedops_tensor_desc static_desc(const Kernel& k, const OrtKernelInfo* info, size_t i) {
  const OrtApi* api = k.api;
  fusedops_tensor_desc t{};
  t.dtype = to_fusedops_dtype(input_type(k.cfg, i));
  t.rank = -1;
  if (input_optional(k.cfg.kind, i)) {
    // An absent optional input has an empty name; fusedops_describe takes it as dtype unknown, rank -1.
    size_t size = 0;
    if (ok(api, api->KernelInfo_GetInputName(info, i, nullptr, &size)) && size <= 1) t.dtype = FUSEDOPS_DTYPE_UNKNOWN;
    if (t.dtype == FUSEDOPS_DTYPE_UNKNOWN) return t;
  }
  OrtTypeInfo* ti = nullptr;
  if (!ok(api, api->KernelInfo_GetInputTypeInfo(info, i, &ti)) || !ti) return t;
  const OrtTensorTypeAndShapeInfo* tsi = nullptr;  // owned by ti
  size_t rank = 0;
  if (ok(api, api->CastTypeInfoToTensorInfo(ti, &tsi)) && tsi && ok(api, api->GetDimensionsCount(tsi, &rank)) &&
      rank > 0 && rank <= FUSEDOPS_MAX_RANK && ok(api, api->GetDimensions(tsi, t.dims, rank)))
    t.rank = static_cast<int32_t>(rank);
  api->ReleaseTypeInfo(ti);
  return t;
}

}  // namespace fusedops_ort
