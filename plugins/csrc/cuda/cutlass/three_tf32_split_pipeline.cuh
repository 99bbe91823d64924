// The 3xTF32 mainloop's pipeline when the math warpgroups signal W's split through mbarriers: CUTLASS's TMA pipeline
// plus one "split done" mbarrier a stage, on which every math thread arrives once its share of the stage is split
// (and fenced for the async proxy) and waits before its wgmmas read the stage. Unlike the named barrier it replaces,
// arriving does not wait: a warpgroup waits only when the other's share of a stage it is about to use is not done, so
// the two need not run in step (three_tf32_mainloop.cuh, ThreeTf32Schedule).
//
// The split barriers are initialised by the thread that initialises the pipeline's, in the constructor the kernel runs
// in every thread before its block-wide barrier, so they are ready before any warp uses them.
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

template <int Stages, int kSplitThreads>
class SplitBarrierPipeline : public cutlass::PipelineTmaAsync<Stages> {
  using Base = cutlass::PipelineTmaAsync<Stages>;

 public:
  using typename Base::Params;
  using typename Base::PipelineState;

  struct SharedStorage : Base::SharedStorage {
    cutlass::arch::ClusterBarrier split_done[Stages];
  };

  template <class ClusterShape>
  CUTLASS_DEVICE SplitBarrierPipeline(SharedStorage& storage, Params params, ClusterShape cluster_shape)
      : Base(storage, params, cluster_shape), split_done_(&storage.split_done[0]) {
    if (cutlass::canonical_warp_idx_sync() == 0 && cute::elect_one_sync()) {
      CUTLASS_PRAGMA_UNROLL
      for (int s = 0; s < Stages; ++s) split_done_[s].init(kSplitThreads);
    }
    cutlass::arch::fence_barrier_init();
  }

  // After this thread's share of the stage of `state` is split and fenced.
  CUTLASS_DEVICE void arrive_split(PipelineState state) { split_done_[state.index()].arrive(); }
  // Before wgmmas read the stage of `state`: every thread's share is split.
  CUTLASS_DEVICE void wait_split(PipelineState state) { split_done_[state.index()].wait(state.phase()); }

 private:
  cutlass::arch::ClusterBarrier* split_done_;
};

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
