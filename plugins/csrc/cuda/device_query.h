// What the launch planners ask the device once per plan (never on the run path): SM count, L2 size, compute
// capability, occupancy, and the opt-ins some launches need (large dynamic shared memory, thread-block clusters).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

namespace fusedops {
namespace cuda {

struct DeviceInfo {
  int sms = 132;
  int l2 = 0;
  int cc_major = 0;  // 0: unknown (no cluster launches)
};
// The current device; an unanswered query falls back to an H100/H200-like SM count and no L2 / cluster knowledge.
DeviceInfo device_info();

// Resident blocks an SM keeps of `kernel` (0 when the occupancy calculator does not answer).
int blocks_per_sm(const void* kernel, int threads, size_t smem);

// Opts `kernel` in to `smem` bytes of dynamic shared memory when above the default 48 KiB; false if refused.
bool allow_smem(const void* kernel, size_t smem);

// Whether `kernel` can run as clusters of `cluster` blocks of `threads` threads on this device (sm_90 and later,
// the occupancy calculator finds room for at least one cluster).
bool fits_clusters(const void* kernel, const DeviceInfo& dev, int cluster, int threads, size_t smem);

}  // namespace cuda
}  // namespace fusedops
