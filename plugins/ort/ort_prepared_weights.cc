// PreparedWeights (ort_prepared_weights.h). Only CUDA kernels call get(): a CPU plan takes no prepared weights.
#include "ort_prepared_weights.h"

#ifdef FUSEDOPS_ORT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fusedops_ort {

PreparedWeights::~PreparedWeights() {
  if (ptr_) {
    if (OrtStatus* st = api_->AllocatorFree(alloc_, ptr_)) api_->ReleaseStatus(st);
  }
  if (alloc_) api_->ReleaseAllocator(alloc_);
}

OrtStatus* PreparedWeights::get(const OrtApi* api, OrtKernelContext* ctx, const OrtValue* like,
                                const fusedops_plan* plan, size_t bytes, const void* w, void* stream,
                                const void** out) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (ptr_ && from_ == w && bytes_ == bytes) {
    *out = ptr_;
    return nullptr;
  }
  api_ = api;
  if (!alloc_) {
    const OrtMemoryInfo* in_mem = nullptr;
    if (OrtStatus* st = api->GetTensorMemoryInfo(like, &in_mem)) return st;
    int device = 0;
    if (OrtStatus* st = api->MemoryInfoGetId(in_mem, &device)) return st;
    OrtMemoryInfo* mem = nullptr;
    if (OrtStatus* st = api->CreateMemoryInfo("Cuda", OrtDeviceAllocator, device, OrtMemTypeDefault, &mem)) return st;
    OrtStatus* st = api->KernelContext_GetAllocator(ctx, mem, &alloc_);
    api->ReleaseMemoryInfo(mem);
    if (st) return st;
  }
  if (ptr_) {
    if (OrtStatus* st = api->AllocatorFree(alloc_, ptr_)) api->ReleaseStatus(st);
    ptr_ = nullptr;
  }
  void* p = nullptr;
  if (OrtStatus* st = api->AllocatorAlloc(alloc_, bytes, &p)) {
    api->ReleaseStatus(st);  // no memory for the form: run without it
    return nullptr;
  }
  char err[512] = {0};
  if (fusedops_plan_prepare_weights(plan, w, p, bytes, static_cast<fusedops_stream_t>(stream), err, sizeof err) !=
      FUSEDOPS_OK) {
    if (OrtStatus* st = api->AllocatorFree(alloc_, p)) api->ReleaseStatus(st);
    return nullptr;  // e.g. a stream being captured: the kernel splits W itself
  }
#ifdef FUSEDOPS_ORT_WITH_CUDA
  // Concurrent Run()s may use other streams: the form must be written before any of them reads it.
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
#endif
  ptr_ = p;
  bytes_ = bytes;
  from_ = w;
  *out = p;
  return nullptr;
}

}  // namespace fusedops_ort
