// ONNX Runtime inside the fusedops Triton backend. ORT is dlopened once a process from the path the model's
// backend file names: the onnxruntime Python package's own libonnxruntime, so the server runs the ORT that
// `fusedops.ort` tested. Each model instance owns one session, with libfusedops_ort.so registered.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#define ORT_API_MANUAL_INIT
#include "onnxruntime_cxx_api.h"

namespace fusedops::triton {

// Loads ONNX Runtime from `path` and initialises the C++ API (once a process; a second, different path is refused).
// Returns "" or why it could not.
std::string load_onnxruntime(const std::string& path);

struct SessionSpec {
  std::string model;       // the .onnx file
  std::string op_library;  // libfusedops_ort.so
  bool cuda = false;       // the CUDA EP on device_id, else the CPU EP
  int device_id = 0;
  int intra_op_threads = 0;                                 // 0: ORT's default
  std::vector<std::pair<std::string, std::string>> config;  // session config entries (fusedops.*)
};

struct TensorInfo {
  std::string name;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
};

class Session {
 public:
  // The session, or null with `err` set (ORT's message).
  static std::unique_ptr<Session> create(const SessionSpec& spec, std::string* err);
  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  // One run on host tensors (in inputs() order); the outputs in outputs() order, on the host. Throws Ort::Exception.
  std::vector<Ort::Value> run(const std::vector<Ort::Value>& inputs);

 private:
  explicit Session(Ort::Session s) : session_(std::move(s)) {}
  Ort::Session session_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<const char*> input_names_, output_names_;
};

// Bytes of one element of an ONNX tensor type this backend serves (0: not served).
size_t element_size(ONNXTensorElementDataType type);

}  // namespace fusedops::triton
