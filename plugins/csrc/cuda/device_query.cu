// Device queries of the launch planners (device_query.h).
#include "cuda/device_query.h"

namespace fusedops {
namespace cuda {

DeviceInfo device_info() {
  DeviceInfo info;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&info.l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&info.cc_major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      info.sms <= 0) {
    cudaGetLastError();  // clear the failed query's (non-sticky) error
    return DeviceInfo{};
  }
  return info;
}

int blocks_per_sm(const void* kernel, int threads, size_t smem) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return per_sm;
}

bool allow_smem(const void* kernel, size_t smem) {
  if (smem <= 48 * 1024) return true;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

bool fits_clusters(const void* kernel, const DeviceInfo& dev, int cluster, int threads, size_t smem) {
  if (dev.cc_major < 9 || cluster < 2 || cluster > 8) return false;  // 8: the portable cluster size limit
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(cluster));
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(cluster);
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return clusters > 0;
}

}  // namespace cuda
}  // namespace fusedops
