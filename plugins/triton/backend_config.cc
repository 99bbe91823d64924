// fusedops_backend.cfg (backend_config.h).
#include "backend_config.h"

#include <fstream>

namespace fusedops::triton {

namespace {
std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

bool parse_int(const std::string& v, int lo, int hi, int* out) {
  try {
    size_t used = 0;
    const long x = std::stol(v, &used);
    if (used != v.size() || x < lo || x > hi) return false;
    *out = int(x);
    return true;
  } catch (...) {
    return false;
  }
}
}  // namespace

std::string read_backend_config(const std::string& model_dir, BackendConfig* out) {
  const std::string path = model_dir + "/fusedops_backend.cfg";
  std::ifstream in(path);
  if (!in) return "cannot read " + path + " (the fusedops backend's model file; `fusedops serve --server native` "
                  "writes it)";
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    const std::string where = path + " line " + std::to_string(n);
    if (eq == std::string::npos) return where + ": expected key=value, got '" + line + "'";
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    int flag = 0;
    std::string* path = key == "onnxruntime_library" ? &out->onnxruntime_library
                        : key == "op_library"        ? &out->op_library
                        : key == "model"             ? &out->model
                                                     : nullptr;
    if (path != nullptr) {
      // untrusted text inside a model folder: a relative path stays inside it (absolute paths are the server's own)
      if (value.empty() || value.find("..") != std::string::npos)
        return where + ": " + key + " must name a file inside the model folder or an absolute path (no '..'), got '" +
               value + "'";
      *path = value[0] == '/' ? value : model_dir + "/" + value;
    } else if (key == "provider") {
      if (value != "cpu" && value != "cuda") return where + ": provider must be cpu or cuda, got '" + value + "'";
      out->cuda = value == "cuda";
    } else if (key == "batched") {
      if (!parse_int(value, 0, 1, &flag)) return where + ": batched must be 0 or 1, got '" + value + "'";
      out->batched = flag == 1;
    } else if (key == "intra_op_threads") {
      if (!parse_int(value, 0, 4096, &out->intra_op_threads))
        return where + ": intra_op_threads must be an integer in [0, 4096], got '" + value + "'";
    } else if (key == "max_rows") {
      if (!parse_int(value, 0, 1 << 30, &out->max_rows))
        return where + ": max_rows must be an integer in [0, 2^30], got '" + value + "'";
    } else if (key.rfind("config.", 0) == 0 && key.size() > 7) {
      out->session_config.emplace_back(key.substr(7), value);
    } else {
      return where + ": unknown key '" + key + "'";
    }
  }
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"onnxruntime_library",
                                                                              &out->onnxruntime_library},
                                   {"op_library", &out->op_library},
                                   {"model", &out->model}})
    if (value->empty()) return path + ": '" + key + "' is missing";
  return "";
}

}  // namespace fusedops::triton
