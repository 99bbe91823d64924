// ONNX Runtime for the fusedops Triton backend (ort_runtime.h).
#include "ort_runtime.h"

#include <dlfcn.h>

#include <mutex>

namespace fusedops::triton {

namespace {
std::mutex g_mutex;
std::string g_loaded;      // the path ORT came from
Ort::Env* g_env = nullptr;  // one a process, as ORT wants; never destroyed (the server may still run sessions)
}  // namespace

std::string load_onnxruntime(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_loaded.empty())
    return g_loaded == path ? "" : "ONNX Runtime is already loaded from " + g_loaded + ", not " + path;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return "cannot load ONNX Runtime from " + path + ": " + dlerror();
  using GetApiBase = const OrtApiBase* (*)();
  auto get = reinterpret_cast<GetApiBase>(dlsym(handle, "OrtGetApiBase"));
  const OrtApi* api = get != nullptr ? get()->GetApi(ORT_API_VERSION) : nullptr;
  if (api == nullptr)
    return path + " is not an ONNX Runtime offering C API version " + std::to_string(ORT_API_VERSION) +
           " (ONNX Runtime 1.21 or later)";
  Ort::InitApi(api);
  try {
    g_env = new Ort::Env(ORT_LOGGING_LEVEL_WARNING, "fusedops-triton");
  } catch (const Ort::Exception& e) {
    return std::string("ONNX Runtime could not start: ") + e.what();
  }
  g_loaded = path;
  return "";
}

size_t element_size(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return 8;
    default: return 0;
  }
}

std::unique_ptr<Session> Session::create(const SessionSpec& spec, std::string* err) {
  try {
    if (g_env == nullptr) {
      *err = "ONNX Runtime is not loaded";
      return nullptr;
    }
    Ort::SessionOptions so;
    if (spec.intra_op_threads > 0) so.SetIntraOpNumThreads(spec.intra_op_threads);
    for (const auto& [key, value] : spec.config) so.AddConfigEntry(key.c_str(), value.c_str());
    so.RegisterCustomOpsLibrary(spec.op_library.c_str());
    if (spec.cuda) {
      const OrtApi& api = Ort::GetApi();
      OrtCUDAProviderOptionsV2* cuda = nullptr;
      Ort::ThrowOnError(api.CreateCUDAProviderOptions(&cuda));
      const std::string device = std::to_string(spec.device_id);
      const char* keys[] = {"device_id"};
      const char* values[] = {device.c_str()};
      OrtStatus* status = api.UpdateCUDAProviderOptions(cuda, keys, values, 1);
      if (status == nullptr) status = api.SessionOptionsAppendExecutionProvider_CUDA_V2(so, cuda);
      api.ReleaseCUDAProviderOptions(cuda);
      Ort::ThrowOnError(status);
    }
    std::unique_ptr<Session> s(new Session(Ort::Session(*g_env, spec.model.c_str(), so)));
    Ort::AllocatorWithDefaultOptions alloc;
    for (int io = 0; io < 2; ++io) {
      const size_t n = io == 0 ? s->session_.GetInputCount() : s->session_.GetOutputCount();
      auto& infos = io == 0 ? s->inputs_ : s->outputs_;
      for (size_t i = 0; i < n; ++i) {
        Ort::TypeInfo type = io == 0 ? s->session_.GetInputTypeInfo(i) : s->session_.GetOutputTypeInfo(i);
        auto tensor = type.GetTensorTypeAndShapeInfo();
        TensorInfo t;
        t.name = (io == 0 ? s->session_.GetInputNameAllocated(i, alloc) : s->session_.GetOutputNameAllocated(i, alloc))
                     .get();
        t.type = tensor.GetElementType();
        t.rank = tensor.GetDimensionsCount();
        if (element_size(t.type) == 0) {
          *err = "tensor '" + t.name + "' has an ONNX element type this backend does not serve (float32, float16, "
                 "bfloat16, float64, int32, int64)";
          return nullptr;
        }
        infos.push_back(std::move(t));
      }
    }
    for (const auto& t : s->inputs_) s->input_names_.push_back(t.name.c_str());
    for (const auto& t : s->outputs_) s->output_names_.push_back(t.name.c_str());
    return s;
  } catch (const Ort::Exception& e) {
    *err = e.what();
    return nullptr;
  }
}

std::vector<Ort::Value> Session::run(const std::vector<Ort::Value>& inputs) {
  return session_.Run(Ort::RunOptions{nullptr}, input_names_.data(), inputs.data(), inputs.size(),
                      output_names_.data(), output_names_.size());
}

}  // namespace fusedops::triton
