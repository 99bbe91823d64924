// 3xTF32 on sm_90: a float32 GEMM from three TF32 tensor-core products per k-tile, hi*hi + hi*lo + lo*hi, where
// hi = tf32(x) (round to nearest) and lo = x - hi (exact in float32; wgmma reads its TF32 part). hi + lo carries 22-23
// significant bits of x, and the dropped lo*lo term is below float32 rounding, so the result has float32-level
// error at about a third of TF32 speed (CUTLASS's sm_80 OpMultiplyAddFastF32 does the same with mma.sync; CUTLASS
// has no sm_90 wgmma version, so this is ours).
//
// Built on CUTLASS's TMA + wgmma warp-specialised mainloop (CollectiveMma<MainloopSm90TmaGmmaWarpSpecialized...>),
// instantiated with 32-bit unsigned operands so that TMA copies the float32 bits unchanged (with float operands it
// would round them to TF32 on the way in, losing the low part). The producer side (load, load_tail) is the base's; the
// consumer side is ours:
// - X (A) goes to wgmma from registers: each thread loads its fragment of the landed stage and splits it there. Read
//   from shared memory by wgmma, as in the first version, A's hi and lo parts cost two stage-sized writes and three
//   reads a k-tile, and the split's cvt.rna sequences were 41 % of the stall samples (ncu, H200, 2026-11-27).
// - W (B) is split in shared memory by both math warpgroups (hi in place, lo into a second buffer of the same
//   swizzled layout), fenced for the async proxy; they meet at a named barrier or per-stage mbarriers
//   (ThreeTf32Schedule). On prepared weights (kPresplitW) TMA brings both parts and nothing is split here
//   (three_tf32_presplit_mainloop.cuh). Splitting W in the producer warpgroup's one idle warp instead (CUTLASS's
//   "MainloopAux" warp) was slower: 1.63-1.72 ms to 1.34-1.36 (H200, 2026-11-27; docs/kernels.md).
// - The split is hi = x rounded to TF32 (to nearest, ties away: the add-and-mask cvt.rna.tf32.f32 does for finite x)
//   and lo = x - hi, exact in float32 and handed to wgmma unrounded (TF32 wgmma reads the top 19 bits: lo truncated
//   at 2^-21 of x). On the CPU this matches rounding lo too (tools/split_3xtf32_check.py --gemm); non-finite x gives
//   a NaN lo, as the rounding instruction did.
// - Each k-tile's products go to fresh accumulators, added into the running sums with IEEE adds once they are done
//   (the tensor cores' own accumulation rounds toward zero: see mma). How the wait for them is hidden is
//   the schedule (ThreeTf32Schedule); stages are released exactly as the base mainloop does, so its mma_tail applies.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>

#include "cuda/cutlass/three_tf32_split_pipeline.cuh"
#include "cuda/cutlass/tf32_split.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

// How the math warpgroups meet once W's split is done. Both schedules do the same arithmetic in the same order (the
// GPU tests compare them bit for bit).
enum class ThreeTf32Schedule {
  // A named barrier every k-tile: the two warpgroups run in step, so the tensor cores idle while both add their fresh
  // sums and load the next X. 1.34-1.44 ms on the reference shape (H200, 2026-11-27).
  kNamedBarrier = 0,
  // Per-stage mbarriers (three_tf32_split_pipeline.cuh): a warpgroup waits only when the other's share of the stage
  // it is about to read is not split yet, so they drift apart and one's wgmmas can run while the other adds its sums:
  // 1.26-1.35 ms in the same runs. The default. (Measured and not kept, same day: the second warpgroup started a
  // k-tile late, 1.28-1.34; each k-tile's wgmmas in two batches with half of the next X loaded between them,
  // 1.30-1.36; the next X prefetched into 16 more registers, which spilled, 1.33-1.35; W split by the producer
  // warpgroup's one idle warp instead of the math warpgroups, 1.63-1.72: docs/kernels.md.)
  kSplitBarriers = 1,
  // W split once per weights (fusedops_plan_prepare_weights): TMA loads its hi and lo parts into the stage and the
  // math warpgroups only split X. The producer side is three_tf32_presplit_mainloop.cuh's.
  kPresplitW = 2,
};

template <class Base, ThreeTf32Schedule kSchedule>
struct ThreeTf32Mainloop : Base {
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TiledMma;
  using typename Base::TileShape;

  static constexpr bool kSplitBarriers = kSchedule == ThreeTf32Schedule::kSplitBarriers;
  static constexpr bool kPresplit = kSchedule == ThreeTf32Schedule::kPresplitW;
  static constexpr int kStages = Base::DispatchPolicy::Stages;
  static constexpr int kMathThreads = cute::size(TiledMma{});
  using MainloopPipeline = cute::conditional_t<kSplitBarriers, SplitBarrierPipeline<kStages, kMathThreads>,
                                               typename Base::MainloopPipeline>;

  static_assert(cute::is_same_v<typename Base::ElementA, uint32_t> &&
                    cute::is_same_v<typename Base::ElementB, uint32_t>,
                "the base mainloop must move raw 32-bit words (no TF32 rounding by TMA)");
  static_assert(cute::is_same_v<typename TiledMma::ValTypeA, cutlass::tfloat32_t>, "TF32 wgmma expected");
  static_assert(cute::cosize_v<SmemLayoutB> == cute::size(SmemLayoutB{}),
                "stages must be compact (the split walks each stage as one flat array)");

  // The same warpgroup tiling with A from registers (its accumulator layout is the base's, which the kernel and the
  // epilogue use).
  static constexpr int kWarpGroups = cute::size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  using RegisterATiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<cutlass::tfloat32_t, cutlass::tfloat32_t, float, TileShape, cute::GMMA::Major::K,
                                 cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::Int<kWarpGroups>, cute::_1, cute::_1>>{}));
  static_assert(cute::is_same_v<decltype(RegisterATiledMma{}.get_layoutC_TV()), decltype(TiledMma{}.get_layoutC_TV())>,
                "register-A and shared-memory-A tilings must give the same accumulator layout");

  struct SharedStorage {
    struct TensorStorage : Base::TensorStorage {
      cute::array_aligned<typename TiledMma::ValTypeB, cute::cosize_v<SmemLayoutB>> smem_B_lo;
    } tensors;
    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  static constexpr int kStageB = cute::size<0>(SmemLayoutB{}) * cute::size<1>(SmemLayoutB{});  // elements a stage
  static constexpr int kStageABytes = cute::size<0>(SmemLayoutA{}) * cute::size<1>(SmemLayoutA{}) * 4;
  static_assert(cute::size<0>(SmemLayoutA{}) == 64 * kWarpGroups && cute::size<1>(SmemLayoutA{}) == 32 &&
                    kStageABytes % 1024 == 0,
                "A's addressing below assumes 64 rows a warpgroup, K tiles of 32 (one 128-byte swizzle row) and stages "
                "a whole number of swizzle patterns apart");

  // Where this thread's A fragment lies in shared memory, computed here rather than through CuTe's swizzled smem
  // tensor, which addressed each value with 64-bit generic arithmetic and generic loads (ncu, 2026-11-27). The TF32
  // wgmma A fragment: value v of k-block kb is row 16 warp + lane / 4 + 8 (v & 1) of the warpgroup's 64, column
  // 8 kb + lane % 4 + 4 (v >> 1). The stage is K-major with 128-byte rows whose 16-byte chunks are swizzled by the
  // shared-memory address (TMA's 128-byte swizzle: chunk index XOR address bits 7-9), and the stages start on 128
  // bytes, not necessarily on the swizzle's 1024: `row8` is those bits of the thread's first row's address.
  // tools/cutlass_layout_check.cu checks both against CuTe's layouts, at every 128-byte start.
  CUTLASS_HOST_DEVICE static uint32_t a_thread_offset(int t) {
    const int wg = t / 128, warp = t % 128 / 32, lane = t % 32;
    return uint32_t((64 * wg + 16 * warp + lane / 4) * 128 + lane % 4 * 4);
  }
  CUTLASS_HOST_DEVICE static uint32_t a_value_offset(uint32_t row8, int v, int kb) {
    // the rows of one thread are 8 apart (1024 bytes): the same swizzle bits
    return uint32_t((v & 1) * 8 * 128) + ((uint32_t((v >> 1) + 2 * kb) ^ row8) << 4);
  }
  CUTLASS_HOST_DEVICE static uint32_t a_row8(uint32_t thread_address) { return (thread_address >> 7) & 7u; }
  static_assert(kStageB % (4 * kMathThreads) == 0, "every math thread splits whole 16-byte vectors");

  // W's hi in place and lo into the lo buffer, for this thread's share of one stage.
  CUTLASS_DEVICE static void split(uint32_t* hi, uint32_t* lo, int thread_idx) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 4 * thread_idx; i < kStageB; i += 4 * kMathThreads) {
      uint4 x = *reinterpret_cast<const uint4*>(hi + i), l;
      tf32_split4(x, l);
      *reinterpret_cast<uint4*>(hi + i) = x;
      *reinterpret_cast<uint4*>(lo + i) = l;
    }
  }

  // This thread's A values of a landed stage, split into hi / lo registers; `address(v, kb)`: the shared-memory
  // address of value v of k-block kb.
  template <class Frag, class Address>
  CUTLASS_DEVICE static void load_a_at(Frag& hi, Frag& lo, Address address) {
    CUTLASS_PRAGMA_UNROLL
    for (int kb = 0; kb < cute::size<2>(hi); ++kb) {
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < cute::size<0>(hi); ++v) {
        uint32_t u;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(u) : "r"(address(v, kb)));
        const uint32_t h = tf32_hi_bits(u);
        hi(v, 0, kb) = cutlass::tfloat32_t::bitcast(h);
        lo(v, 0, kb) = cutlass::tfloat32_t::bitcast(tf32_lo_bits(u, h));
      }
    }
  }
  // From the stage's address of the thread's first value and its swizzle bits.
  template <class Frag>
  CUTLASS_DEVICE static void load_a(Frag& hi, Frag& lo, uint32_t a_stage, uint32_t row8) {
    load_a_at(hi, lo, [&](int v, int kb) { return a_stage + a_value_offset(row8, v, kb); });
  }
  // From this thread's eight 16-byte chunk addresses of stage 0 (`chunk[j]`: k-blocks j / 2, column half j % 2;
  // a_value_offset's values) plus the stage's offset: one add per chunk a k-tile instead of the swizzle.
  template <class Frag>
  CUTLASS_DEVICE static void load_a_chunks(Frag& hi, Frag& lo, const uint32_t (&chunk)[8], uint32_t stage_offset) {
    load_a_at(hi, lo, [&](int v, int kb) {
      return chunk[(v >> 1) + 2 * kb] + stage_offset + uint32_t((v & 1) * 8 * 128);
    });
  }

  // A landed stage: this thread's share of W split (kSplitBarriers: and signalled; ready_stage waits for the rest;
  // kPresplit: nothing to split).
  CUTLASS_DEVICE static void take_stage(MainloopPipeline& pipeline, PipelineState state, uint32_t* b_words,
                                        uint32_t* b_lo_words, int thread_idx) {
    auto barrier_token = pipeline.consumer_try_wait(state);
    pipeline.consumer_wait(state, barrier_token);
    if constexpr (!kPresplit) {  // (presplit: TMA brought W's hi and lo parts)
      const int stage = state.index();
      split(b_words + stage * kStageB, b_lo_words + stage * kStageB, thread_idx);
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> visible to wgmma (async proxy)
      if constexpr (kSplitBarriers)
        pipeline.arrive_split(state);
      else
        cutlass::arch::NamedBarrier::sync(kMathThreads, 0);  // every thread's share is split
    }
  }
  // Before wgmmas read the stage: every thread's share is split (kNamedBarrier: take_stage's barrier saw to it).
  CUTLASS_DEVICE static void ready_stage(MainloopPipeline& pipeline, PipelineState state) {
    if constexpr (kSplitBarriers) pipeline.wait_split(state);
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    // A as TF32 values (the float32 bits TMA copied), read into registers (the tensor gives the fragment's shape); B
    // through descriptors.
    Tensor sA = make_tensor(make_smem_ptr(reinterpret_cast<cutlass::tfloat32_t*>(shared_tensors.smem_A.data())),
                            SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});
    Tensor sB_lo = make_tensor(make_smem_ptr(shared_tensors.smem_B_lo.data()), SmemLayoutB{});

    RegisterATiledMma tiled_mma;
    const int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    auto warp_group_mma = tiled_mma.get_slice(warp_group_idx * cutlass::NumThreadsPerWarpGroup);
    auto thread_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tCrA_hi = thread_mma.partition_fragment_A(sA(_, _, 0));  // (MMA,MMA_M,MMA_K)
    Tensor tCrA_lo = make_fragment_like(tCrA_hi);
    // W's descriptors (MMA,MMA_N,MMA_K,PIPE), their base address field pinned in a register: otherwise ptxas rebuilt
    // it from the shared-memory window every k-tile (S2UR SR_CgaCtaId, shifts and masks).
    Tensor tCrB = pin_descriptors(warp_group_mma.make_fragment_B(warp_group_mma.partition_B(sB)));
    Tensor tCrB_lo = pin_descriptors(warp_group_mma.make_fragment_B(warp_group_mma.partition_B(sB_lo)));
    CUTE_STATIC_ASSERT_V(size<1>(tCrA_hi) == Int<1>{});  // one m64 block a warpgroup (load_a)
    CUTE_STATIC_ASSERT_V(size<1>(tCrA_hi) == size<1>(accum));  // MMA_M
    CUTE_STATIC_ASSERT_V(size<2>(tCrA_hi) == size<2>(tCrB));   // MMA_K

    uint32_t* b_words = reinterpret_cast<uint32_t*>(shared_tensors.smem_B.data());
    uint32_t* b_lo_words = reinterpret_cast<uint32_t*>(shared_tensors.smem_B_lo.data());
    const uint32_t a_thread = cute::cast_smem_ptr_to_uint(shared_tensors.smem_A.data()) + a_thread_offset(thread_idx);
    const uint32_t row8 = a_row8(a_thread);  // (stages are 16 KiB apart: the same swizzle bits in each)

    // Each k-tile's products go to fresh accumulators, added into `accum` with IEEE adds once they are done. The
    // tensor cores' accumulation rounds toward zero: 3 K / 8 MMAs into one accumulator left this mode 4-17 x eager
    // FP32's error, growing linearly in K (docs/kernels.md); the convolution's 3xTF32 fell below eager's with the
    // same change (docs/convt.md). One fresh set: the next stage's W is split while this k-tile's wgmmas run, and
    // they are waited for before the add. (Two fresh sets spilled 312 bytes; a pair of k-tiles a set with two A
    // register sets, so that the tensor cores idle once a pair, spilled 320 and ran 1.56 ms to one set's 1.33.)
    Tensor fresh = make_fragment_like(accum);
    clear(accum);  // 0 + the first k-tile's sums is those sums: no select in the add
    warpgroup_fence_operand(accum);
    auto a_stage = [&](PipelineState state) { return a_thread + uint32_t(state.index()) * kStageABytes; };
    // On prepared weights (registers to spare) the thread's chunk addresses are computed once and pinned: left to
    // itself the compiler rebuilt them from threadIdx every k-tile (243 -> 232 instructions a k-tile, ncu 1.38 -> 1.32
    // ms: H200, 2026-11-27). The split schedules keep the registers for W's split.
    uint32_t a_chunk[8];
    if constexpr (kPresplit) {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < 8; ++j) {
        a_chunk[j] = a_thread + ((uint32_t(j) ^ row8) << 4);
        // A shuffle from itself: ptxas cannot recompute a shuffle's result, so it keeps it (an empty asm statement
        // only held against the front end; ptxas rebuilt the addresses whenever the loop changed).
        a_chunk[j] = __shfl_sync(0xFFFFFFFF, a_chunk[j], threadIdx.x % 32);
      }
    }
    auto load_x = [&](PipelineState state) {
      if constexpr (kPresplit)
        load_a_chunks(tCrA_hi, tCrA_lo, a_chunk, uint32_t(state.index()) * kStageABytes);
      else
        load_a(tCrA_hi, tCrA_lo, a_stage(state), row8);
    };
    if (k_tile_count > 0) {
      take_stage(pipeline, smem_pipe_read, b_words, b_lo_words, thread_idx);
      load_x(smem_pipe_read);
    }
    // Counted down: with `k_tile < k_tile_count` ptxas re-derived the count from K in every k-tile, twice. This loop
    // and the pinned values above and below took the prepared kernel's k-tile from 234 to 216 instructions a math
    // warp (cuobjdump -sass, nvcc 13.0; in-kernel split 307-321 -> 303-308).
    PipelineState smem_pipe_release = smem_pipe_read;
    CUTLASS_PRAGMA_NO_UNROLL
    for (int left = k_tile_count; left > 0; --left) {
      // Broadcast from lane 0 so that ptxas knows the index is warp-uniform and builds W's descriptors in uniform
      // registers (with the pipeline state's own index each HGMMA took two R2UR: ncu SASS, H200, 2026-11-27).
      const int stage = __shfl_sync(0xFFFFFFFF, smem_pipe_read.index(), 0);
      ready_stage(pipeline, smem_pipe_read);
      warpgroup_fence_operand(fresh);
      warpgroup_fence_operand(tCrA_hi);
      warpgroup_fence_operand(tCrA_lo);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;  // the k-tile's first products overwrite the fresh set
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA_hi); ++k_block) {
        // Small products first.
        cute::gemm(tiled_mma, tCrA_lo(_, _, k_block), tCrB(_, _, k_block, stage), fresh);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        cute::gemm(tiled_mma, tCrA_hi(_, _, k_block), tCrB_lo(_, _, k_block, stage), fresh);
        cute::gemm(tiled_mma, tCrA_hi(_, _, k_block), tCrB(_, _, k_block, stage), fresh);
      }
      warpgroup_commit_batch();
      ++smem_pipe_read;
      const bool more = left > 1;
      if (more) take_stage(pipeline, smem_pipe_read, b_words, b_lo_words, thread_idx);  // while the wgmmas run
      // The previous k-tile's stage goes back to the producer (its wgmmas were waited for). Where this happens
      // matters (ncu cycles at a fixed clock, H200, 2026-11-27): at the top of the k-tile 1.71-1.73 M (the wgmmas
      // start 13 instructions later), here 1.71 M and the fastest timed (1.00 ms against 1.02), right after the
      // wgmma wait, before the adds, 1.92-1.98 M.
      if (left < k_tile_count) {
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(fresh);
      warpgroup_fence_operand(tCrA_hi);
      warpgroup_fence_operand(tCrA_lo);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += fresh(i);
      if (more) load_x(smem_pipe_read);
    }
    warpgroup_fence_operand(accum);
  }
  // mma_tail: the base's (waits for all wgmmas, releases the one stage still held).

  // A descriptor tensor whose base address field comes through a shuffle (warp-uniform: the warpgroup's), so ptxas
  // keeps it in a register instead of rebuilding it from the shared-memory window.
  template <class DescTensor>
  CUTLASS_DEVICE static auto pin_descriptors(DescTensor const& t) {
    auto it = t.data();
    it.desc_.reg32_[0] = __shfl_sync(0xFFFFFFFF, it.desc_.reg32_[0], 0);
    return cute::make_tensor(it, t.layout());
  }
};

// The mainloop type: CUTLASS's builder picks the TF32 wgmma atom and swizzled shared-memory layouts for float
// operands; the same collective is then instantiated on uint32_t operands and extended with the split.
template <class TileShape, class ClusterShape, int Stages, ThreeTf32Schedule kSchedule>
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
  using type = ThreeTf32Mainloop<Raw, kSchedule>;
};

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
