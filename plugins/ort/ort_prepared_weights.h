// W's prepared form for a CUDA GemmGroupNormAct node whose W is a constant initializer (fusedops_plan_prepare_weights:
// 3xTF32 plans then load W split once instead of splitting it in every run). One buffer a node, from the EP's
// allocator, made at the first run that can use it and kept until the session ends.
#pragma once

#include <cstddef>
#include <mutex>

#include "fusedops/fusedops.h"
#include "onnxruntime_c_api.h"

namespace fusedops_ort {

class PreparedWeights {
 public:
  PreparedWeights() = default;
  PreparedWeights(const PreparedWeights&) = delete;
  PreparedWeights& operator=(const PreparedWeights&) = delete;
  ~PreparedWeights();

  // *out: the form of W (at `w`, device memory) for `plan`, whose form is `bytes` long, made now on `stream` if
  // need be; null (and no error) when it cannot be made here, e.g. while ORT captures a CUDA graph: the run then
  // splits W in the kernel. `like` gives the device (an input of the run).
  OrtStatus* get(const OrtApi* api, OrtKernelContext* ctx, const OrtValue* like, const fusedops_plan* plan,
                 size_t bytes, const void* w, void* stream, const void** out);

 private:
  std::mutex mu_;
  const OrtApi* api_ = nullptr;
  OrtAllocator* alloc_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  const void* from_ = nullptr;  // the W it was made from (an initializer's address is fixed for the session)
};

}  // namespace fusedops_ort
