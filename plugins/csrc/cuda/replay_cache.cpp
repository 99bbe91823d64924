// CUDA graphs of one plan's launches, keyed by the call's pointers (see replay_cache.h).
#include "cuda/replay_cache.h"

namespace fusedops {
namespace cuda {

ReplayCache::~ReplayCache() {
  // At process exit the CUDA context may already be gone: errors are of no use here.
  for (Entry& e : entries_)
    if (e.exec) cudaGraphExecDestroy(e.exec);
  if (capture_stream_) cudaStreamDestroy(capture_stream_);
  cudaGetLastError();
}

bool ReplayCache::make_key(const void* const* inputs, int32_t num_inputs, const void* y, const void* workspace,
                           Key* key) {
  if (num_inputs < 0 || num_inputs + 2 > kMaxPointers) return false;
  key->fill(nullptr);
  for (int32_t i = 0; i < num_inputs; ++i) (*key)[i] = inputs[i];
  (*key)[num_inputs] = y;
  (*key)[num_inputs + 1] = workspace;
  return true;
}

bool ReplayCache::run(const Key& key, cudaStream_t stream, const Launch& launch, cudaError_t* error) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (status != cudaStreamCaptureStatusNone) return false;  // the caller's own graph records the launches
  std::lock_guard<std::mutex> lock(mu_);
  if (off_) return false;
  ++clock_;
  for (Entry& e : entries_) {
    if (e.exec && e.key == key) {
      e.used = clock_;
      *error = cudaGraphLaunch(e.exec, stream);
      return true;
    }
  }
  int seen = -1;
  for (int i = 0; i < recent_count_; ++i)
    if (recent_[i] == key) seen = i;
  if (seen < 0) {  // a pointer set's first sight runs directly
    recent_[recent_next_] = key;
    recent_next_ = (recent_next_ + 1) % kRecent;
    recent_count_ = recent_count_ < kRecent ? recent_count_ + 1 : kRecent;
    return false;
  }
  recent_[seen] = Key{};  // captured below: no longer a first sight
  const cudaGraphExec_t exec = capture(launch);
  if (!exec) {
    off_ = true;
    return false;
  }
  Entry* slot = &entries_[0];
  for (Entry& e : entries_) {
    if (!e.exec) {
      slot = &e;
      break;
    }
    if (e.used < slot->used) slot = &e;
  }
  if (slot->exec) cudaGraphExecDestroy(slot->exec);
  slot->key = key;
  slot->exec = exec;
  slot->used = clock_;
  *error = cudaGraphLaunch(exec, stream);
  return true;
}

cudaGraphExec_t ReplayCache::capture(const Launch& launch) {
  if (!capture_stream_ && cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking) != cudaSuccess) {
    capture_stream_ = nullptr;
    cudaGetLastError();
    return nullptr;
  }
  if (cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  const cudaError_t launched = launch(capture_stream_);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(capture_stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  const bool ok = launched == cudaSuccess && ended == cudaSuccess && graph &&
                  cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph) cudaGraphDestroy(graph);
  if (ok) return exec;
  cudaGetLastError();  // a failed capture leaves no error behind: the call then runs directly
  return nullptr;
}

}  // namespace cuda
}  // namespace fusedops
