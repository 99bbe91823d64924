// The 3xTF32 mainloop on weights split once (ThreeTf32Schedule::kPresplitW): W's TF32 hi part and its lo part lie in
// global memory (fusedops_plan_prepare_weights wrote them with tf32_split.cuh's functions, so they are the bits the
// in-kernel split gives), and the producer's TMA brings both into the stage: W_lo into the buffer the other schedules
// split into. The math warpgroups then only split X. The consumer side is ThreeTf32Mainloop's; this adds W_lo's
// TMA descriptor (its arguments, parameters and transaction bytes) and a load that issues three copies a stage.
//
// Why: the split of W is done by every tile of every call although W is a constant in inference (ORT and TensorRT
// initialisers, a module's parameters between updates), and with the FADDs of the fresh accumulators it was the
// critical path (ncu, H200, 2026-11-27: docs/kernels.md). Costs: W_lo's global traffic (each W tile is read twice),
// and the prepared weights (2 x W's bytes), which the caller owns.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

#include "cuda/cutlass/three_tf32_mainloop.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

template <class Base>
struct ThreeTf32PresplitMainloop : ThreeTf32Mainloop<Base, ThreeTf32Schedule::kPresplitW> {
  using Consumer = ThreeTf32Mainloop<Base, ThreeTf32Schedule::kPresplitW>;
  using typename Consumer::MainloopPipeline;
  using typename Consumer::PipelineState;
  using typename Consumer::SmemLayoutA;
  using typename Consumer::SmemLayoutB;
  using typename Consumer::TensorStorage;
  using typename Consumer::TileShape;
  using ClusterShape = typename Base::DispatchPolicy::ClusterShape;
  using GmemTiledCopyA = typename Base::GmemTiledCopyA;
  using GmemTiledCopyB = typename Base::GmemTiledCopyB;

  // ptr_B: W's hi part, ptr_B_lo: its lo part, both laid out as W (same stride dB).
  struct Arguments : Base::Arguments {
    uint32_t const* ptr_B_lo = nullptr;
  };
  struct Params : Base::Params {
    typename Base::Params::TMA_B tma_load_b_lo;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    Params p;
    static_cast<typename Base::Params&>(p) = Base::to_underlying_arguments(problem_shape, args, workspace);
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    cute::Tensor lo = cute::make_tensor(args.ptr_B_lo, cute::make_layout(cute::make_shape(N, K, L), args.dB));
    p.tma_load_b_lo = cute::make_tma_copy_B_sm90(GmemTiledCopyB{}, lo, SmemLayoutB{}(cute::_, cute::_, cute::Int<0>{}),
                                                 TileShape{}, ClusterShape{});
    p.tma_transaction_bytes += Base::TmaTransactionBytesNK;  // each stage also receives W_lo's tile
    p.tma_transaction_bytes_nk += Base::TmaTransactionBytesNK;
    return p;
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    Base::prefetch_tma_descriptors(params);
    cute::prefetch_tma_descriptor(params.tma_load_b_lo.get_tma_descriptor());
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    auto base = Base::load_init(problem_shape_MNKL, params);
    auto [M, N, K, L] = problem_shape_MNKL;
    cute::Tensor m_lo = params.tma_load_b_lo.get_tma_tensor(cute::make_shape(N, K, L));
    cute::Tensor g_lo = cute::local_tile(m_lo, TileShape{}, cute::make_coord(cute::_, cute::_, cute::_),
                                         cute::Step<cute::Underscore, cute::_1, cute::_1>{});  // (BLK_N,BLK_K,n,k,l)
    return cute::make_tuple(cute::get<0>(base), cute::get<1>(base), g_lo);
  }

  // The base's load (sm90_mma_tma_gmma_ss_warpspecialized.hpp) with a third copy: W_lo's tile into the lo buffer.
  template <class TensorA, class TensorB, class TensorBLo, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB, TensorBLo> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int, uint32_t block_rank_in_cluster,
                           TensorStorage& shared_tensors) {
    using namespace cute;
    if (!elect_one_sync()) return;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
    Tensor sB_lo = make_tensor(make_smem_ptr(reinterpret_cast<uint32_t*>(shared_tensors.smem_B_lo.data())),
                               SmemLayoutB{});
    constexpr uint32_t cluster_x = get<0>(ClusterShape{});
    const uint2 local = {block_rank_in_cluster % cluster_x, block_rank_in_cluster / cluster_x};
    auto tma_a = params.tma_load_a.get_slice(local.y);
    auto tma_b = params.tma_load_b.get_slice(local.x);
    auto tma_b_lo = params.tma_load_b_lo.get_slice(local.x);
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor tAgA = tma_a.partition_S(get<0>(load_inputs)(_, _, m_coord, _, l_coord));  // (TMA,TMA_M,TMA_K,k)
    Tensor tAsA = tma_a.partition_D(sA);                                               // (TMA,TMA_M,TMA_K,PIPE)
    Tensor tBgB = tma_b.partition_S(get<1>(load_inputs)(_, _, n_coord, _, l_coord));
    Tensor tBsB = tma_b.partition_D(sB);
    Tensor tBgB_lo = tma_b_lo.partition_S(get<2>(load_inputs)(_, _, n_coord, _, l_coord));
    Tensor tBsB_lo = tma_b_lo.partition_D(sB_lo);
    uint16_t mcast_a = 0, mcast_b = 0;
    auto block_layout = Layout<ClusterShape>{};  // (m,n) -> block id
    if constexpr (is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>)
      for (int n = 0; n < size<1>(block_layout); ++n) mcast_a |= uint16_t(1) << block_layout(local.x, n, Int<0>{});
    if constexpr (is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>)
      for (int m = 0; m < size<0>(block_layout); ++m) mcast_b |= uint16_t(1) << block_layout(m, local.y, Int<0>{});
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      auto* barrier = pipeline.producer_get_barrier(smem_pipe_write);
      const int stage = smem_pipe_write.index();
      copy(params.tma_load_a.with(*barrier, mcast_a), tAgA(_, _, _, *k_tile_iter), tAsA(_, _, _, stage));
      copy(params.tma_load_b.with(*barrier, mcast_b), tBgB(_, _, _, *k_tile_iter), tBsB(_, _, _, stage));
      copy(params.tma_load_b_lo.with(*barrier, mcast_b), tBgB_lo(_, _, _, *k_tile_iter), tBsB_lo(_, _, _, stage));
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

// The presplit mainloop type of a tile (the same built collective as ThreeTf32MainloopOf's).
template <class TileShape, class ClusterShape, int Stages>
struct ThreeTf32PresplitMainloopOf {
  using type = ThreeTf32PresplitMainloop<
      typename ThreeTf32MainloopOf<TileShape, ClusterShape, Stages, ThreeTf32Schedule::kPresplitW>::Raw>;
};

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
