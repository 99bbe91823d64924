// CUTLASS's own GEMM (its builder's mainloop and TMA epilogue, D = acc, no GroupNorm) with the tile configurations
// of the fused kernels: the floor the GroupNorm epilogue adds to, next to cuBLAS (tools/cutlass_bench.py). One
// configuration per build (-DPLAIN_CFG=k), so a machine with many cores compiles them in parallel:
//
//   for k in 0 1 2 3 4 5 6 7 8; do nvcc -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a \
//     -isystem third_party/cutlass/include -DPLAIN_CFG=$k tools/cutlass_plain_gemm.cu -o plain_$k & done; wait
//   ./plain_0 [M N K]   # prints one line: config, ms (median of 50 back-to-back launches), TFLOP/s
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#ifndef PLAIN_CFG
#define PLAIN_CFG 0
#endif

using namespace cute;

template <class AB, int TM, int TN, int TK, int CM, bool PINGPONG>
struct Plain {
  using D = AB;
  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<Int<CM>, _1, _1>;
  using KSchedule = cute::conditional_t<PINGPONG, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                        cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using ESchedule = cute::conditional_t<PINGPONG, cutlass::epilogue::TmaWarpSpecialized,
                                        cutlass::epilogue::TmaWarpSpecializedCooperative>;
  static constexpr int kAlign = 16 / int(sizeof(AB));
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlign, D,
      cutlass::layout::RowMajor, kAlign, ESchedule>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, AB, cutlass::layout::RowMajor, kAlign, AB,
      cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename Epilogue::SharedStorage))>,
      KSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

#if PLAIN_CFG == 0
using Cfg = Plain<float, 128, 256, 32, 2, false>;
static const char* kName = "tf32 coop128x256x32_cluster2";
#elif PLAIN_CFG == 1
using Cfg = Plain<float, 64, 256, 32, 2, true>;
static const char* kName = "tf32 pingpong64x256x32_cluster2";
#elif PLAIN_CFG == 2
using Cfg = Plain<float, 128, 128, 32, 2, false>;
static const char* kName = "tf32 coop128x128x32_cluster2";
#elif PLAIN_CFG == 3
using Cfg = Plain<cutlass::bfloat16_t, 128, 256, 64, 2, false>;
static const char* kName = "bf16 coop128x256x64_cluster2";
#elif PLAIN_CFG == 4
using Cfg = Plain<cutlass::bfloat16_t, 64, 256, 64, 2, true>;
static const char* kName = "bf16 pingpong64x256x64_cluster2";
#elif PLAIN_CFG == 5
using Cfg = Plain<cutlass::bfloat16_t, 128, 128, 64, 2, false>;
static const char* kName = "bf16 coop128x128x64_cluster2";
#elif PLAIN_CFG == 6
using Cfg = Plain<float, 128, 256, 32, 1, false>;
static const char* kName = "tf32 coop128x256x32";
#elif PLAIN_CFG == 7
using Cfg = Plain<cutlass::bfloat16_t, 256, 128, 64, 2, false>;
static const char* kName = "bf16 coop256x128x64_cluster2";
#else
using Cfg = Plain<cutlass::bfloat16_t, 128, 256, 64, 1, false>;
static const char* kName = "bf16 coop128x256x64";
#endif

template <class T>
__global__ void fill(T* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    p[i] = T(float(h & 0xffff) / 65536.f - 0.5f);
  }
}

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                     \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

int main(int argc, char** argv) {
  const int M = argc > 3 ? atoi(argv[1]) : 1024, N = argc > 3 ? atoi(argv[2]) : 8192,
            K = argc > 3 ? atoi(argv[3]) : 8192;
  using AB = typename Cfg::Gemm::ElementA;
  using D = typename Cfg::D;
  AB *a, *b;
  D* d;
  CHECK(cudaMalloc(&a, sizeof(AB) * size_t(M) * K));
  CHECK(cudaMalloc(&b, sizeof(AB) * size_t(N) * K));
  CHECK(cudaMalloc(&d, sizeof(D) * size_t(M) * N));
  fill<<<1024, 256>>>(a, size_t(M) * K, 1u);
  fill<<<1024, 256>>>(b, size_t(N) * K, 2u);
  typename Cfg::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {a, make_stride(int64_t(K), Int<1>{}, int64_t(M) * K), b, make_stride(int64_t(K), Int<1>{}, int64_t(N) * K)},
      {{1.f, 0.f}, nullptr, make_stride(int64_t(N), Int<1>{}, int64_t(M) * N), d,
       make_stride(int64_t(N), Int<1>{}, int64_t(M) * N)}};
  cudaGetDevice(&args.hw_info.device_id);
  args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(args.hw_info.device_id);
  typename Cfg::Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    fprintf(stderr, "%s: cannot implement %d x %d x %d\n", kName, M, N, K);
    return 1;
  }
  void* ws = nullptr;
  const size_t ws_bytes = Cfg::Gemm::get_workspace_size(args);
  if (ws_bytes) CHECK(cudaMalloc(&ws, ws_bytes));
  if (gemm.initialize(args, ws) != cutlass::Status::kSuccess) return 1;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0), cudaEventCreate(&t1);
  std::vector<float> ms;
  for (int i = 0; i < 60; ++i) {
    cudaEventRecord(t0);
    if (gemm.run() != cutlass::Status::kSuccess) return 1;
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float x = 0;
    cudaEventElapsedTime(&x, t0, t1);
    if (i >= 10) ms.push_back(x);
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  printf("plain CUTLASS %-34s %d x %d x %d: %.4f ms  %.0f TFLOP/s\n", kName, M, N, K, med,
         2.0 * M * N * K / (med * 1e-3) / 1e12);
  return 0;
}
