// Internal: CUDA graphs of one plan's launches, keyed by the call's pointers (issue 8: host work per call).
//
// A GemmGroupNormAct call on cuBLASLt costs 18-34 µs of host time, most of it cuBLASLt's own per-call work (matmul
// descriptor checks, kernel attribute queries, cuLaunchKernelEx) and two kernel launches. Replaying a CUDA graph of
// the same launches costs one cudaGraphLaunch. A graph bakes in its pointers, so graphs are kept per pointer set:
// serving loops and PyTorch's caching allocator hand the same few buffers to a plan call after call. A pointer set is
// captured the second time it is seen within the last kRecent first sights (one-off pointers run directly), at most
// kEntries sets are kept (least recently used goes), and calls on a stream that is itself being captured
// (torch.cuda.graph, reduce-overhead) run directly. (H200, 2026-11-24: with 4 entries and only the last first sight
// remembered, the latency bench's 3 rotated inputs x 2 outputs thrashed and ran directly on some rows.)
// Capture happens on a private stream of the cache; the graph is then launched on the caller's stream.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>

namespace fusedops {
namespace cuda {

class ReplayCache {
 public:
  static constexpr int kMaxPointers = 16;  // inputs (5 + 8 extras), output, workspace
  static constexpr int kEntries = 8;
  static constexpr int kRecent = 8;
  using Key = std::array<const void*, kMaxPointers>;
  // Runs the plan's launches on a stream; returns cudaSuccess or the launch error.
  using Launch = std::function<cudaError_t(cudaStream_t)>;

  ~ReplayCache();

  // The call's pointers as a key; false when there are more than kMaxPointers (such calls run directly).
  static bool make_key(const void* const* inputs, int32_t num_inputs, const void* y, const void* workspace, Key* key);

  // Replays (or captures, then replays) the launches for `key` on `stream`: true when it did, with *error the
  // result of cudaGraphLaunch. False when the caller must run the launches directly: the key's first sight, a stream
  // that is being captured, or a capture that failed (graphs are then off for this cache's lifetime).
  bool run(const Key& key, cudaStream_t stream, const Launch& launch, cudaError_t* error);

 private:
  struct Entry {
    Key key{};
    cudaGraphExec_t exec = nullptr;
    uint64_t used = 0;
  };
  cudaGraphExec_t capture(const Launch& launch);

  std::mutex mu_;
  Entry entries_[kEntries];
  Key recent_[kRecent]{};  // pointer sets seen once, a ring
  int recent_count_ = 0, recent_next_ = 0;
  bool off_ = false;
  uint64_t clock_ = 0;
  cudaStream_t capture_stream_ = nullptr;
};

}  // namespace cuda
}  // namespace fusedops
