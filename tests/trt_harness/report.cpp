// fusedops_trt_harness: the JSON written to stdout (the walk's report, --list).
#include "harness.h"

namespace fusedops_harness {

std::string jsonString(std::string const& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string jsonDims(Dims const& d) {
  std::string s = "[";
  for (int32_t i = 0; i < d.nbDims; ++i) s += (i ? "," : "") + std::to_string(d.d[i]);
  return s + "]";
}


int listCreators(IPluginCreatorInterface* const* creators, int32_t n) {
  std::string s = "{\"creators\":[";
  for (int32_t i = 0; i < n; ++i) {
    InterfaceInfo info = creators[i]->getInterfaceInfo();
    s += std::string(i ? "," : "") + "{\"kind\":" + jsonString(info.kind ? info.kind : "") +
         ",\"major\":" + std::to_string(info.major);
    if (info.kind && std::string(info.kind) == "PLUGIN CREATOR_V3ONE") {
      auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
      s += ",\"name\":" + jsonString(c->getPluginName()) + ",\"version\":" + jsonString(c->getPluginVersion()) +
           ",\"namespace\":" + jsonString(c->getPluginNamespace()) + ",\"fields\":[";
      PluginFieldCollection const* fc = c->getFieldNames();
      for (int32_t k = 0; fc && k < fc->nbFields; ++k)
        s += std::string(k ? "," : "") + "{\"name\":" + jsonString(fc->fields[k].name) +
             ",\"type\":" + std::to_string(static_cast<int>(fc->fields[k].type)) + "}";
      s += "]";
    }
    s += "}";
  }
  std::printf("%s]}\n", s.c_str());
  return 0;
}


}  // namespace fusedops_harness
