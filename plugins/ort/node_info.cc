// What ORT's kernel info says about a node, read at kernel creation: its attributes (typed, a wrong type never a
// silent default) and the graph's static shapes of its inputs.
#include <string>

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

std::string text_of(const std::string& v) { return v; }
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
  } else {
    FUSEDOPS_GROUPNORM_ACT_ATTRIBUTES(FUSEDOPS_ORT_READ)
  }
#undef FUSEDOPS_ORT_READ
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
