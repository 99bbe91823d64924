// 3xTF32 on sm_90: a float32 GEMM from three TF32 tensor-core products per k-tile, hi*hi + hi*lo + lo*hi, where
// hi = tf32(x) (round to nearest) and lo = tf32(x - hi) (x - hi is exact in float32). hi + lo carries 22-23
// significant bits of x, and the dropped lo*lo term is below float32 rounding, so the result has float32-level
// error at about a third of TF32 speed (CUTLASS's sm_80 OpMultiplyAddFastF32 does the same with mma.sync; CUTLASS
// has no sm_90 wgmma version, so this is ours).
//
// Built on CUTLASS's TMA + wgmma warp-specialised mainloop (CollectiveMma<MainloopSm90TmaGmmaWarpSpecialized...>),
// instantiated with 32-bit unsigned operands so that TMA copies the float32 bits unchanged (with float operands it
// would round them to TF32 on the way in, losing the low part). Only the consumer side differs: after a stage
// lands, the math threads split it in shared memory (hi in place, lo into a second buffer of the same layout),
// fence the generic-proxy writes for the async proxy, meet at a named barrier, and issue the three wgmma products.
// One k-tile of wgmmas stays in flight while the next stage is split; the stage behind it is released, exactly as
// the base mainloop does (so its mma_tail applies unchanged). The producer side (load, load_tail) is the base's.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

// tf32 rounding of a float32 (round to nearest, ties away): the low 13 bits of the result are zero.
CUTLASS_DEVICE uint32_t to_tf32_bits(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

template <class Base>
struct ThreeTf32Mainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TiledMma;

  static_assert(cute::is_same_v<typename Base::ElementA, uint32_t> && cute::is_same_v<typename Base::ElementB, uint32_t>,
                "the base mainloop must move raw 32-bit words (no TF32 rounding by TMA)");
  static_assert(cute::is_same_v<typename TiledMma::ValTypeA, cutlass::tfloat32_t>, "TF32 wgmma expected");
  static_assert(cute::cosize_v<SmemLayoutA> == cute::size(SmemLayoutA{}) &&
                    cute::cosize_v<SmemLayoutB> == cute::size(SmemLayoutB{}),
                "stages must be compact (the split walks each stage as one flat array)");

  struct SharedStorage {
    struct TensorStorage : Base::TensorStorage {
      cute::array_aligned<typename TiledMma::ValTypeA, cute::cosize_v<SmemLayoutA>> smem_A_lo;
      cute::array_aligned<typename TiledMma::ValTypeB, cute::cosize_v<SmemLayoutB>> smem_B_lo;
    } tensors;
    using PipelineStorage = typename Base::PipelineStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  static constexpr int kStageA = cute::size<0>(SmemLayoutA{}) * cute::size<1>(SmemLayoutA{});  // elements a stage
  static constexpr int kStageB = cute::size<0>(SmemLayoutB{}) * cute::size<1>(SmemLayoutB{});
  static constexpr int kMathThreads = cute::size(TiledMma{});
  static_assert(kStageA % (4 * kMathThreads) == 0 && kStageB % (4 * kMathThreads) == 0,
                "every math thread splits whole 16-byte vectors");

  // hi = tf32(x) in place, lo = tf32(x - hi) into the lo buffer, for this thread's share of one stage.
  CUTLASS_DEVICE static void split(uint32_t* hi, uint32_t* lo, int count, int thread_idx) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 4 * thread_idx; i < count; i += 4 * kMathThreads) {
      uint4 x = *reinterpret_cast<const uint4*>(hi + i);
      uint4 l;
      uint32_t* xs = reinterpret_cast<uint32_t*>(&x);
      uint32_t* ls = reinterpret_cast<uint32_t*>(&l);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < 4; ++j) {
        const float f = __uint_as_float(xs[j]);
        const uint32_t h = to_tf32_bits(f);
        ls[j] = to_tf32_bits(f - __uint_as_float(h));
        xs[j] = h;
      }
      *reinterpret_cast<uint4*>(hi + i) = x;
      *reinterpret_cast<uint4*>(lo + i) = l;
    }
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});
    Tensor sA_lo = make_tensor(make_smem_ptr(shared_tensors.smem_A_lo.data()), SmemLayoutA{});
    Tensor sB_lo = make_tensor(make_smem_ptr(shared_tensors.smem_B_lo.data()), SmemLayoutB{});

    constexpr int MmaWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout = make_layout(Int<MmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    const int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));
    Tensor tCrA_lo = thread_mma.make_fragment_A(thread_mma.partition_A(sA_lo));
    Tensor tCrB_lo = thread_mma.make_fragment_B(thread_mma.partition_B(sB_lo));

    uint32_t* a_words = reinterpret_cast<uint32_t*>(shared_tensors.smem_A.data());
    uint32_t* b_words = reinterpret_cast<uint32_t*>(shared_tensors.smem_B.data());
    uint32_t* a_lo_words = reinterpret_cast<uint32_t*>(shared_tensors.smem_A_lo.data());
    uint32_t* b_lo_words = reinterpret_cast<uint32_t*>(shared_tensors.smem_B_lo.data());

    PipelineState smem_pipe_release = smem_pipe_read;
    // Each k-tile's products go to fresh accumulators, added into `accum` with IEEE adds once they are done. The
    // tensor cores' accumulation rounds toward zero: 3 K / 8 MMAs into one accumulator left this mode 4-17 x eager
    // FP32's error, growing linearly in K (docs/kernels.md); the convolution's 3xTF32 fell below eager's with the
    // same change (docs/convt.md). One fresh set (two spilled 312 bytes): the next stage is split while this
    // k-tile's wgmmas run, and they are waited for before the add.
    Tensor fresh = make_fragment_like(accum);
    auto split_stage = [&](PipelineState state) {
      auto barrier_token = pipeline.consumer_try_wait(state);
      pipeline.consumer_wait(state, barrier_token);
      const int stage = state.index();
      split(a_words + stage * kStageA, a_lo_words + stage * kStageA, kStageA, thread_idx);
      split(b_words + stage * kStageB, b_lo_words + stage * kStageB, kStageB, thread_idx);
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> visible to wgmma (async proxy)
      cutlass::arch::NamedBarrier::sync(kMathThreads, 0);  // every thread's share is split
    };
    warpgroup_fence_operand(accum);
    if (k_tile_count > 0) split_stage(smem_pipe_read);
    CUTLASS_PRAGMA_NO_UNROLL
    for (int k_tile = 0; k_tile < k_tile_count; ++k_tile) {
      if (k_tile > 0) {  // the previous k-tile's wgmmas were waited for: its stage goes back to the producer
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
      const int stage = smem_pipe_read.index();
      warpgroup_fence_operand(fresh);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;  // the k-tile's first products overwrite the fresh set
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        // Small products first.
        cute::gemm(tiled_mma, tCrA_lo(_, _, k_block, stage), tCrB(_, _, k_block, stage), fresh);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        cute::gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB_lo(_, _, k_block, stage), fresh);
        cute::gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB(_, _, k_block, stage), fresh);
      }
      warpgroup_commit_batch();
      ++smem_pipe_read;
      if (k_tile + 1 < k_tile_count) split_stage(smem_pipe_read);  // while this k-tile's wgmmas run
      warpgroup_wait<0>();
      warpgroup_fence_operand(fresh);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) = k_tile == 0 ? fresh(i) : accum(i) + fresh(i);
    }
    warpgroup_fence_operand(accum);
  }
  // mma_tail: the base's (waits for all wgmmas, releases the one stage still held).
};

// The mainloop type: CUTLASS's builder picks the TF32 wgmma atom and swizzled shared-memory layouts for float
// operands; the same collective is then instantiated on uint32_t operands and extended with the split.
template <class TileShape, class ClusterShape, int Stages>
struct ThreeTf32MainloopOf {
  using Built = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, float, cutlass::layout::RowMajor, 4, float,
      cutlass::layout::ColumnMajor, 4, float, TileShape, ClusterShape, cutlass::gemm::collective::StageCount<Stages>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Raw = cutlass::gemm::collective::CollectiveMma<
      typename Built::DispatchPolicy, TileShape, uint32_t, typename Built::StrideA, uint32_t, typename Built::StrideB,
      typename Built::TiledMma, typename Built::GmemTiledCopyA, typename Built::SmemLayoutAtomA,
      typename Built::SmemCopyAtomA, typename Built::TransformA, typename Built::GmemTiledCopyB,
      typename Built::SmemLayoutAtomB, typename Built::SmemCopyAtomB, typename Built::TransformB>;
  using type = ThreeTf32Mainloop<Raw>;
};

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
