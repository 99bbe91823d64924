// libtriton_fusedops.so: a native Triton backend ("backend: fusedops") that serves a fused ONNX model on ONNX
// Runtime with libfusedops_ort.so, in tritonserver's own process. The Python backend costs ≈ 110 µs of stub work a
// request (docs/serving.md); here a dynamic batch is one gather, one ORT run and one scatter of host buffers.
//
// A batch: every request's inputs (Triton validated them against config.pbtxt) are checked against the session's
// (type, rank, trailing dims equal across the batch) and copied into one host buffer per input, dim 0 concatenated;
// ORT runs once (the CUDA EP copies in and out itself); each request gets its rows of every output. A request that
// does not fit gets its own error response and the rest still run; an ORT failure answers every request of the
// batch with ORT's message; the server keeps serving either way.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend_config.h"
#include "ort_runtime.h"
#include "triton_api.h"

#define FUSEDOPS_BACKEND_API extern "C" __attribute__((visibility("default")))

namespace fusedops::triton {
namespace {

TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const std::string& msg) {
  return TRITONSERVER_ErrorNew(code, ("fusedops backend: " + msg).c_str());
}

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

TRITONSERVER_DataType triton_type(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return TRITONSERVER_TYPE_FP32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return TRITONSERVER_TYPE_FP16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return TRITONSERVER_TYPE_BF16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return TRITONSERVER_TYPE_FP64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return TRITONSERVER_TYPE_INT32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return TRITONSERVER_TYPE_INT64;
    default: return TRITONSERVER_TYPE_INVALID;
  }
}

struct ModelState {
  BackendConfig config;
  std::string name;
};

struct InstanceState {
  std::unique_ptr<Session> session;
  Ort::MemoryInfo host{Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault)};
};

// One request's inputs, checked: their shapes and host buffers, in the session's input order.
struct Admitted {
  TRITONBACKEND_Request* request;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<std::pair<const void*, uint64_t>>> buffers;
  int64_t rows = 0;
};

// "" if `request` can join a batch whose first member (if any) is `first`; fills `a`.
std::string admit(const Session& s, const BackendConfig& config, TRITONBACKEND_Request* request,
                  const Admitted* first, Admitted* a) {
  const bool batched = config.batched;
  const int64_t max_rows = config.max_rows;
  a->request = request;
  for (const TensorInfo& t : s.inputs()) {
    TRITONBACKEND_Input* in = nullptr;
    const char* name = nullptr;
    TRITONSERVER_DataType type;
    const int64_t* shape = nullptr;
    uint32_t rank = 0, buffers = 0;
    uint64_t bytes = 0;
    TRITONSERVER_Error* e = TRITONBACKEND_RequestInput(request, t.name.c_str(), &in);
    if (e == nullptr) e = TRITONBACKEND_InputProperties(in, &name, &type, &shape, &rank, &bytes, &buffers);
    if (e != nullptr) {
      std::string msg = "input '" + t.name + "': " + TRITONSERVER_ErrorMessage(e);
      TRITONSERVER_ErrorDelete(e);
      return msg;
    }
    if (type != triton_type(t.type)) return "input '" + t.name + "' has the wrong data type for the model";
    if (rank != t.rank || (batched && rank == 0)) return "input '" + t.name + "' has the wrong rank for the model";
    std::vector<int64_t> dims(shape, shape + rank);
    // an unbatched model's dim 0 is the caller's to choose: max_rows is its bound (--max-batch-size)
    if (!batched && max_rows > 0 && rank > 0 && dims[0] > max_rows)
      return "input '" + t.name + "' has " + std::to_string(dims[0]) + " rows; this server takes at most " +
             std::to_string(max_rows) + " (--max-batch-size)";
    uint64_t want = element_size(t.type);
    for (int64_t d : dims) want *= uint64_t(d < 0 ? 0 : d);
    if (want != bytes) return "input '" + t.name + "' holds " + std::to_string(bytes) + " bytes, its shape says " +
                              std::to_string(want);
    if (first != nullptr) {
      const auto& f = first->shapes[a->shapes.size()];
      if (!std::equal(dims.begin() + 1, dims.end(), f.begin() + 1))
        return "input '" + t.name + "' differs from the batch's other requests beyond dim 0";
    }
    std::vector<std::pair<const void*, uint64_t>> pieces;
    for (uint32_t b = 0; b < buffers; ++b) {
      const void* p = nullptr;
      uint64_t n = 0;
      TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
      int64_t mem_id = 0;
      e = TRITONBACKEND_InputBuffer(in, b, &p, &n, &mem, &mem_id);
      if (e != nullptr) {
        std::string msg = "input '" + t.name + "': " + TRITONSERVER_ErrorMessage(e);
        TRITONSERVER_ErrorDelete(e);
        return msg;
      }
      if (mem == TRITONSERVER_MEMORY_GPU)
        return "input '" + t.name + "' arrived in GPU memory; this backend takes host buffers (HTTP / gRPC)";
      pieces.emplace_back(p, n);
    }
    if (a->shapes.empty()) a->rows = batched ? dims[0] : 1;
    else if (batched && dims[0] != a->rows) return "the inputs disagree on the batch size (dim 0)";
    a->shapes.push_back(std::move(dims));
    a->buffers.push_back(std::move(pieces));
  }
  return "";
}

void respond_error(TRITONBACKEND_Request* request, const std::string& msg) {
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseNew(&response, request)) {
    TRITONSERVER_ErrorDelete(e);
    return;
  }
  TRITONSERVER_Error* err = error(TRITONSERVER_ERROR_INVALID_ARG, msg);
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err))
    TRITONSERVER_ErrorDelete(e);
  TRITONSERVER_ErrorDelete(err);
}

// One ORT run for `batch` (concatenated on dim 0 when there are several) and a response each; "" or why the run
// failed (then no response was sent).
std::string run_batch(InstanceState& st, std::vector<Admitted>& batch) {
  const Session& s = *st.session;
  std::vector<std::vector<char>> staging(s.inputs().size());
  std::vector<Ort::Value> values;
  const bool split = batch.size() > 1;  // several requests: inputs concatenated, outputs split on dim 0
  int64_t total = 0;
  for (const Admitted& a : batch) total += a.rows;
  for (size_t i = 0; i < s.inputs().size(); ++i) {
    std::vector<int64_t> shape = batch[0].shapes[i];
    if (split) shape[0] = total;
    uint64_t bytes = element_size(s.inputs()[i].type);
    for (int64_t d : shape) bytes *= uint64_t(d);
    staging[i].resize(bytes);
    char* dst = staging[i].data();
    for (const Admitted& a : batch)
      for (const auto& [p, n] : a.buffers[i]) {
        std::memcpy(dst, p, n);
        dst += n;
      }
    values.push_back(Ort::Value::CreateTensor(st.host, staging[i].data(), bytes, shape.data(), shape.size(),
                                              s.inputs()[i].type));
  }
  std::vector<Ort::Value> outputs;
  try {
    outputs = st.session->run(values);
  } catch (const Ort::Exception& e) {
    return std::string("ONNX Runtime: ") + e.what();
  }
  // Each request's rows of each output: dim 0 split by the requests' batch sizes (a lone request takes it whole).
  // Shapes, row sizes and data pointers once a batch, not once a request.
  struct Part {
    std::vector<int64_t> shape;
    uint64_t row_bytes;
    const char* data;
  };
  std::vector<Part> parts;
  for (size_t o = 0; o < outputs.size(); ++o) {
    auto info = outputs[o].GetTensorTypeAndShapeInfo();
    std::vector<int64_t> shape = info.GetShape();
    if (split && (shape.empty() || shape[0] != total))
      return "output '" + s.outputs()[o].name + "' does not keep the batch in dim 0";
    // Run() returns its outputs on the host (the CUDA EP copies them back); read nothing that is not.
    if (outputs[o].GetTensorMemoryInfo().GetDeviceType() != OrtMemoryInfoDeviceType_CPU)
      return "output '" + s.outputs()[o].name + "' came back in device memory";
    const uint64_t row_bytes = info.GetElementCount() / uint64_t(split ? total : 1) * element_size(s.outputs()[o].type);
    parts.push_back({std::move(shape), row_bytes, static_cast<const char*>(outputs[o].GetTensorRawData())});
  }
  int64_t row = 0;
  for (const Admitted& a : batch) {
    TRITONBACKEND_Response* response = nullptr;
    TRITONSERVER_Error* e = TRITONBACKEND_ResponseNew(&response, a.request);
    if (e != nullptr) {  // no response object to answer with (Triton is out of memory): nothing more to do here
      TRITONSERVER_ErrorDelete(e);
      row += a.rows;
      continue;
    }
    for (size_t o = 0; e == nullptr && o < parts.size(); ++o) {
      Part& part = parts[o];
      if (split) part.shape[0] = a.rows;
      const uint64_t bytes = part.row_bytes * uint64_t(split ? a.rows : 1);
      TRITONBACKEND_Output* out = nullptr;
      void* buffer = nullptr;
      TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
      int64_t mem_id = 0;
      e = TRITONBACKEND_ResponseOutput(response, &out, s.outputs()[o].name.c_str(), triton_type(s.outputs()[o].type),
                                       part.shape.data(), uint32_t(part.shape.size()));
      if (e == nullptr) e = TRITONBACKEND_OutputBuffer(out, &buffer, bytes, &mem, &mem_id);
      if (e == nullptr && mem == TRITONSERVER_MEMORY_GPU)
        e = error(TRITONSERVER_ERROR_INTERNAL, "Triton asked for the output in GPU memory");
      if (e == nullptr && bytes > 0)
        std::memcpy(buffer, part.data + (split ? part.row_bytes * uint64_t(row) : 0), bytes);
    }
    row += a.rows;
    TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, e);
    if (e != nullptr) TRITONSERVER_ErrorDelete(e);
    if (sent != nullptr) TRITONSERVER_ErrorDelete(sent);
  }
  return "";
}

}  // namespace
}  // namespace fusedops::triton

using namespace fusedops::triton;

FUSEDOPS_BACKEND_API TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend*) {
  uint32_t major = 0, minor = 0;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ApiVersion(&major, &minor)) return e;
  if (major != FUSEDOPS_TRITONBACKEND_API_MAJOR || minor < FUSEDOPS_TRITONBACKEND_API_MINOR)
    return error(TRITONSERVER_ERROR_UNSUPPORTED,
                 "built for Triton's backend API " + std::to_string(FUSEDOPS_TRITONBACKEND_API_MAJOR) + "." +
                     std::to_string(FUSEDOPS_TRITONBACKEND_API_MINOR) + ", this tritonserver offers " +
                     std::to_string(major) + "." + std::to_string(minor));
  return nullptr;
}

FUSEDOPS_BACKEND_API TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name = nullptr;
  const char* location = nullptr;
  TRITONBACKEND_ArtifactType type;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelName(model, &name)) return e;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelRepository(model, &type, &location)) return e;
  auto state = std::make_unique<ModelState>();
  state->name = name;
  std::string why = read_backend_config(location, &state->config);
  if (why.empty()) why = load_onnxruntime(state->config.onnxruntime_library);
  if (!why.empty()) return error(TRITONSERVER_ERROR_INVALID_ARG, "model '" + state->name + "': " + why);
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelSetState(model, state.get())) return e;
  state.release();
  return nullptr;
}

FUSEDOPS_BACKEND_API TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelState(model, &state)) return e;
  delete static_cast<ModelState*>(state);
  return nullptr;
}

FUSEDOPS_BACKEND_API TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  TRITONBACKEND_Model* model = nullptr;
  void* mstate = nullptr;
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device = 0;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceModel(instance, &model)) return e;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelState(model, &mstate)) return e;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceKind(instance, &kind)) return e;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceDeviceId(instance, &device)) return e;
  const auto& m = *static_cast<ModelState*>(mstate);
  SessionSpec spec{m.config.model, m.config.op_library, m.config.cuda,
                   kind == TRITONSERVER_INSTANCEGROUPKIND_GPU ? device : 0, m.config.intra_op_threads,
                   m.config.session_config};
  auto state = std::make_unique<InstanceState>();
  std::string why;
  state->session = Session::create(spec, &why);
  if (!state->session) return error(TRITONSERVER_ERROR_INVALID_ARG, "model '" + m.name + "': " + why);
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceSetState(instance, state.get())) return e;
  state.release();
  return nullptr;
}

FUSEDOPS_BACKEND_API TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  void* state = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceState(instance, &state)) return e;
  delete static_cast<InstanceState*>(state);
  return nullptr;
}

FUSEDOPS_BACKEND_API TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                                         TRITONBACKEND_Request** requests,
                                                                         const uint32_t count) {
  const uint64_t exec_start = now_ns();
  void* istate = nullptr;
  TRITONBACKEND_Model* model = nullptr;
  void* mstate = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceState(instance, &istate)) return e;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceModel(instance, &model)) return e;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelState(model, &mstate)) return e;
  auto& st = *static_cast<InstanceState*>(istate);
  const BackendConfig& config = static_cast<ModelState*>(mstate)->config;
  const bool batched = config.batched;
  // Requests that fit run together (one batch when the model is batched, else one at a time).
  std::vector<std::vector<Admitted>> groups;
  std::vector<bool> ok(count, false);
  for (uint32_t r = 0; r < count; ++r) {
    Admitted a;
    const Admitted* first = batched && !groups.empty() ? &groups[0][0] : nullptr;
    std::string why;
    try {
      why = admit(*st.session, config, requests[r], first, &a);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) {
      respond_error(requests[r], why);
      continue;
    }
    ok[r] = true;
    if (batched && !groups.empty()) groups[0].push_back(std::move(a));
    else groups.push_back({std::move(a)});
  }
  const uint64_t compute_start = now_ns();
  std::vector<std::string> failed(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    try {
      failed[g] = run_batch(st, groups[g]);
    } catch (const std::exception& e) {
      failed[g] = e.what();
    }
    if (!failed[g].empty())
      for (const Admitted& a : groups[g]) respond_error(a.request, failed[g]);
  }
  const uint64_t compute_end = now_ns(), exec_end = now_ns();
  uint64_t rows = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (const Admitted& a : groups[g]) {
      if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceReportStatistics(
              instance, a.request, failed[g].empty(), exec_start, compute_start, compute_end, exec_end))
        TRITONSERVER_ErrorDelete(e);
      rows += uint64_t(a.rows);
    }
  for (uint32_t r = 0; r < count; ++r) {
    if (!ok[r]) {
      if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceReportStatistics(instance, requests[r], false,
                                                                             exec_start, compute_start,
                                                                             compute_start, exec_end))
        TRITONSERVER_ErrorDelete(e);
    }
    if (TRITONSERVER_Error* e = TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL))
      TRITONSERVER_ErrorDelete(e);
  }
  if (rows > 0)
    if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, rows, exec_start,
                                                                               compute_start, compute_end, exec_end))
      TRITONSERVER_ErrorDelete(e);
  return nullptr;
}
