// The CUTLASS kernel types (mainloop + GroupNorm epilogue) and their planned launch (FusedKernel). Included only by
// the one-instantiation files kernel_*.cu.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/device_kernel.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "core/message.h"
#include "cuda/cutlass/fused_kernel.h"
#include "cuda/cutlass/gn_epilogue.cuh"
#include "cuda/cutlass/three_tf32_mainloop.cuh"
#include "cuda/cutlass/three_tf32_presplit_mainloop.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

// Operand and output element types of a mode.
template <gemm_choice::Mode M> struct ModeTypes;
template <> struct ModeTypes<gemm_choice::Mode::TF32> { using AB = float; using D = float; };
template <> struct ModeTypes<gemm_choice::Mode::THREE_TF32> { using AB = float; using D = float; };
template <> struct ModeTypes<gemm_choice::Mode::BF16> { using AB = cutlass::bfloat16_t; using D = cutlass::bfloat16_t; };
template <> struct ModeTypes<gemm_choice::Mode::FP16> { using AB = cutlass::half_t; using D = cutlass::half_t; };

template <class D>
using GnCollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<GnEpilogue<D>>;

// X (M, K) row-major is CUTLASS's A (K-major); W (C, K) row-major is B as N x K, K-major ("column-major B"): a TN
// GEMM, the layout TF32 wgmma requires.
template <gemm_choice::Mode MODE, int TM, int TN, int TK, int CLUSTER_M, bool PINGPONG,
          ThreeTf32Schedule SCHEDULE = ThreeTf32Schedule::kSplitBarriers>
struct KernelOf {
  using AB = typename ModeTypes<MODE>::AB;
  using D = typename ModeTypes<MODE>::D;
  using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
  using ClusterShape = cute::Shape<cute::Int<CLUSTER_M>, cute::_1, cute::_1>;
  using Schedule = cute::conditional_t<PINGPONG, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                       cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using CollectiveEpilogue = GnCollectiveEpilogue<D>;
  static constexpr int kAlign = 16 / int(sizeof(AB));
  // 3xTF32: a stage holds W's lo part too, so the stage count is fixed here: 4 x 48 KiB at 128x128x32.
  using ThreeTf32 = cute::conditional_t<SCHEDULE == ThreeTf32Schedule::kPresplitW,
                                        typename ThreeTf32PresplitMainloopOf<TileShape, ClusterShape, 4>::type,
                                        typename ThreeTf32MainloopOf<TileShape, ClusterShape, 4, SCHEDULE>::type>;
  using Mainloop = cute::conditional_t<
      MODE == gemm_choice::Mode::THREE_TF32, ThreeTf32,
      typename cutlass::gemm::collective::CollectiveBuilder<
          cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, AB, cutlass::layout::RowMajor, kAlign, AB,
          cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
          cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename CollectiveEpilogue::TensorStorage))>,
          Schedule>::CollectiveOp>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, CollectiveEpilogue>;
  static constexpr bool kPresplit = MODE == gemm_choice::Mode::THREE_TF32 && SCHEDULE == ThreeTf32Schedule::kPresplitW;
};

template <class K>
class FusedKernelImpl final : public FusedKernel {
 public:
  using Kernel = typename K::Kernel;
  using Arguments = typename Kernel::Arguments;
  using Params = typename Kernel::Params;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  // A 3xTF32 kernel on presplit weights: runs take W's hi and lo parts.
  static constexpr bool kPresplit = K::kPresplit;

  static int create(const GemmShape& s, const GnEpilogueParams& epi, int device, int sm_count, FusedKernelPtr* out,
                    char* err, size_t err_len) {
    using core::set_message;
    std::unique_ptr<FusedKernelImpl> k(new FusedKernelImpl());
    Arguments& a = k->args_;
    a.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    a.problem_shape = {s.M, s.N, s.K, 1};
    // Stand-in operand addresses (16-byte aligned, never dereferenced here) for the shape checks; runs set the real.
    a.mainloop.ptr_A = reinterpret_cast<const ElementA*>(uintptr_t(256));
    a.mainloop.ptr_B = reinterpret_cast<const ElementB*>(uintptr_t(256));
    if constexpr (kPresplit) a.mainloop.ptr_B_lo = reinterpret_cast<const ElementB*>(uintptr_t(256));
    // Both operands K-major and packed: (row stride, 1, batch stride).
    a.mainloop.dA = cute::make_stride(int64_t(s.K), cute::Int<1>{}, int64_t(s.M) * s.K);
    a.mainloop.dB = cute::make_stride(int64_t(s.K), cute::Int<1>{}, int64_t(s.N) * s.K);
    a.epilogue = epi;
    a.hw_info.device_id = device;
    a.hw_info.sm_count = sm_count;
    if (!Kernel::can_implement(a))
      return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                         "GemmGroupNormAct: CUTLASS cannot implement M=%d C=%d K=%d with this kernel", s.M, s.N, s.K);
    if (Kernel::get_workspace_size(a) != 0)
      return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                         "GemmGroupNormAct: the CUTLASS kernel asks for a workspace (a split-K scheduler?)");
    k->smem_ = int(Kernel::SharedStorageSize);
    const void* fn = reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>);
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k->smem_);
    if (e != cudaSuccess)
      return set_message(err, err_len, FUSEDOPS_ERR_CUDA,
                         "GemmGroupNormAct: %d bytes of shared memory for the CUTLASS kernel: %s", k->smem_,
                         cudaGetErrorString(e));
    k->cluster_m_ = int(cute::size<0>(typename Kernel::ClusterShape{}));
    if (k->cluster_m_ > 1) {
      // How many clusters fit at once (with the kernel's shared memory): the persistent grid's size.
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(unsigned(k->cluster_m_), 1, 1);
      cfg.blockDim = dim3(Kernel::MaxThreadsPerBlock, 1, 1);
      cfg.dynamicSmemBytes = size_t(k->smem_);
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = unsigned(k->cluster_m_);
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      e = cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg);
      if (e != cudaSuccess || clusters <= 0) {
        cudaGetLastError();
        return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                           "GemmGroupNormAct: no cluster of %d CTAs of the CUTLASS kernel fits this device (%s)",
                           k->cluster_m_, cudaGetErrorString(e));
      }
      a.hw_info.max_active_clusters = clusters;
    }
    const Params p = Kernel::to_underlying_arguments(a, nullptr);
    k->grid_ = Kernel::get_grid_shape(p);
    k->block_ = Kernel::get_block_shape();
    *out = std::move(k);
    return FUSEDOPS_OK;
  }

  cudaError_t run(const void* x, const void* w, const void* w_lo, const GnEpilogueParams& epi,
                  cudaStream_t stream) const override {
    Arguments a = args_;
    a.mainloop.ptr_A = static_cast<const ElementA*>(x);
    a.mainloop.ptr_B = static_cast<const ElementB*>(w);
    if constexpr (kPresplit) a.mainloop.ptr_B_lo = static_cast<const ElementB*>(w_lo);
    a.epilogue = epi;
    Params p = Kernel::to_underlying_arguments(a, nullptr);
    void* args[] = {&p};
    const void* fn = reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>);
    if (cluster_m_ == 1) return cudaLaunchKernel(fn, grid_, block_, args, size_t(smem_), stream);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid_;
    cfg.blockDim = block_;
    cfg.dynamicSmemBytes = size_t(smem_);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cluster_m_);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelExC(&cfg, fn, args);
  }

 private:
  Arguments args_{};
  dim3 grid_, block_;
  int smem_ = 0;
  int cluster_m_ = 1;
};

// Row CFG of gemm_choice.h's table of MODE, or (PRESPLIT) of kThreeTf32PresplitConfigs.
constexpr const gemm_choice::TileConfig& table_row(gemm_choice::Mode mode, int cfg, bool presplit) {
  return presplit ? gemm_choice::kThreeTf32PresplitConfigs[cfg] : gemm_choice::config_of(mode, cfg);
}

// The kernel of a table row: tile, cluster, kind and (3xTF32) mainloop schedule from the row, so a row and its kernel
// cannot disagree.
template <gemm_choice::Mode MODE, int CFG, bool PRESPLIT = false>
using KernelOfConfig =
    KernelOf<MODE, table_row(MODE, CFG, PRESPLIT).tile_m, table_row(MODE, CFG, PRESPLIT).tile_n,
             table_row(MODE, CFG, PRESPLIT).tile_k, table_row(MODE, CFG, PRESPLIT).cluster_m,
             table_row(MODE, CFG, PRESPLIT).pingpong, ThreeTf32Schedule(table_row(MODE, CFG, PRESPLIT).schedule)>;
// The 3xTF32 kernel on presplit weights of row CFG of kThreeTf32PresplitConfigs.
template <int CFG>
using PresplitKernelOfConfig = KernelOfConfig<gemm_choice::Mode::THREE_TF32, CFG, true>;

// Defines the factory NAME of configuration CFG of MODE.
#define FUSEDOPS_CUTLASS_FACTORY(NAME, MODE, CFG)                                                                   \
  static_assert((CFG) >= 0 && (CFG) < gemm_choice::config_count(MODE), #NAME ": no such row in gemm_choice.h");    \
  int NAME(const GemmShape& s, const GnEpilogueParams& epi, int device, int sm_count, FusedKernelPtr* out,            \
           char* err, size_t err_len) {                                                                              \
    return FusedKernelImpl<KernelOfConfig<MODE, CFG>>::create(s, epi, device, sm_count, out, err, err_len);         \
  }

// Defines the factory NAME of row CFG of kThreeTf32PresplitConfigs.
#define FUSEDOPS_CUTLASS_PRESPLIT_FACTORY(NAME, CFG)                                                                \
  static_assert(PresplitKernelOfConfig<CFG>::kPresplit, #NAME ": the row must name the presplit schedule");         \
  int NAME(const GemmShape& s, const GnEpilogueParams& epi, int device, int sm_count, FusedKernelPtr* out,            \
           char* err, size_t err_len) {                                                                              \
    return FusedKernelImpl<PresplitKernelOfConfig<CFG>>::create(s, epi, device, sm_count, out, err, err_len);       \
  }

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
