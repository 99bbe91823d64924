// The fusedops Triton backend's per-model file, `fusedops_backend.cfg` beside config.pbtxt (written by
// `fusedops serve --server native` / fusedops.serve.native_repo): one `key=value` a line, `#` comments.
//
//   onnxruntime_library=/abs/path/libonnxruntime.so.1.x   the ONNX Runtime to load (the onnxruntime package's)
//   op_library=/abs/path/libfusedops_ort.so                the fusedops custom-op library
//   model=1/model.onnx                                     the model
// Paths: absolute, or relative to the model folder without '..' (a repository that carries its libraries).
//   provider=cpu|cuda                                      cuda: the CUDA EP on the instance's GPU (KIND_GPU) or 0
//   batched=1|0                                            1: dim 0 of every input and output is the batch
//   intra_op_threads=N                                     0 or absent: ONNX Runtime's default
//   max_rows=N                                             unbatched models: dim 0 of an input at most N (0: any);
//                                                          Triton bounds a batched model's dim 0, not these
//   config.KEY=VALUE                                       a session config entry (fusedops.cpu_blas, ...)
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fusedops::triton {

struct BackendConfig {
  std::string onnxruntime_library, op_library, model;
  bool cuda = false, batched = true;
  int intra_op_threads = 0, max_rows = 0;
  std::vector<std::pair<std::string, std::string>> session_config;
};

// Reads `model_dir`/fusedops_backend.cfg; "" on success, else what is wrong (the file, the line, the key).
std::string read_backend_config(const std::string& model_dir, BackendConfig* out);

}  // namespace fusedops::triton
