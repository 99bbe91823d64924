// Which GEMM a GemmGroupNormAct plan runs: cuBLASLt + the separate GroupNorm epilogue kernel, or the CUTLASS sm_90
// kernel with GroupNorm in its epilogue (and for float32 with allow_tf32 = 0, whether that is 3xTF32). A pure
// function of the descriptor, the device's traits and the plan options, so the CPU tests check it through the C ABI
// (fusedops_gemm_kernel_choice); cuda_plan.cu asks it once per plan. Plain C++: built into every library.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>

#include "fusedops/fusedops.h"

namespace fusedops {
namespace gemm_choice {

// The skinny kernel (cuda/skinny_gemm.cu) takes M in 1..kSkinnyMaxRows: above that the GEMM has arithmetic to do
// and cuBLASLt's tiles win.
constexpr int64_t kSkinnyMaxRows = 16;

// Operand precision of a CUTLASS kernel.
enum class Mode : int32_t { TF32 = 0, BF16 = 1, FP16 = 2, THREE_TF32 = 3 };
constexpr int kModes = 4;

// One CUTLASS instantiation: the CTA tile (for pingpong: each math warp group's tile; the CTA holds two) and the
// cluster along M (2: the W tile is multicast to both CTAs of a cluster, halving its L2 reads).
struct TileConfig {
  int tile_m, tile_n, tile_k;
  int cluster_m;
  bool pingpong;
  const char* name;
  int schedule = 0;  // 3xTF32: the mainloop's ThreeTf32Schedule (three_tf32_mainloop.cuh)
};

// The configurations built for each mode, the default first. The kernel files instantiate them from these tables
// (fused_kernel.cuh's FUSEDOPS_CUTLASS_FACTORY), so a row and its kernel cannot disagree. Models 1-3 (C = 8192,
// groups of 16 / 32 channels) fit all of them.
inline constexpr TileConfig kTf32Configs[] = {
    {128, 256, 32, 2, false, "coop128x256x32_cluster2"},
    {128, 256, 32, 1, false, "coop128x256x32"},
    {64, 256, 32, 2, true, "pingpong64x256x32_cluster2"},
};
inline constexpr TileConfig kBf16Configs[] = {
    {128, 256, 64, 2, false, "coop128x256x64_cluster2"},
    {128, 256, 64, 1, false, "coop128x256x64"},
    {64, 256, 64, 2, true, "pingpong64x256x64_cluster2"},
};
inline constexpr TileConfig kFp16Configs[] = {
    {128, 256, 64, 2, false, "coop128x256x64_cluster2"},
};
// 3xTF32 keeps a second (low-part) copy of every stage in shared memory, so its stages are half the size. One tile,
// two mainloop schedules (three_tf32_mainloop.cuh: per-stage mbarriers or a named barrier after W's split), one CTA
// or a cluster of two along M (W's tiles multicast to both CTAs: half W's L2 traffic; each CTA splits its own copy).
// The cluster is the default because its twin on prepared weights is the fastest 3xTF32 kernel (H200, 2026-11-27,
// docs/kernels.md).
inline constexpr TileConfig kThreeTf32Configs[] = {
    {128, 128, 32, 2, false, "coop128x128x32_cluster2_split_barriers", 1},
    {128, 128, 32, 1, false, "coop128x128x32_split_barriers", 1},
    {128, 128, 32, 1, false, "coop128x128x32_named_barrier", 0},
};

// The 3xTF32 kernels on weights split once (fusedops_plan_prepare_weights; schedule 2: ThreeTf32Schedule::kPresplitW).
// A 3xTF32 plan runs its configuration's twin here (the same tile and cluster: presplit_twin) for calls that pass
// prepared weights.
inline constexpr TileConfig kThreeTf32PresplitConfigs[] = {
    {128, 128, 32, 2, false, "coop128x128x32_cluster2_presplit_w", 2},
    {128, 128, 32, 1, false, "coop128x128x32_presplit_w", 2},
};

template <size_t N>
constexpr int count_of(const TileConfig (&)[N]) {
  return int(N);
}
// How many configurations a mode has (the default first), and configuration i of it (i < config_count(mode)).
constexpr int config_count(Mode mode) {
  return mode == Mode::TF32   ? count_of(kTf32Configs)
         : mode == Mode::BF16 ? count_of(kBf16Configs)
         : mode == Mode::FP16 ? count_of(kFp16Configs)
                              : count_of(kThreeTf32Configs);
}
constexpr const TileConfig& config_of(Mode mode, int i) {
  return mode == Mode::TF32   ? kTf32Configs[i]
         : mode == Mode::BF16 ? kBf16Configs[i]
         : mode == Mode::FP16 ? kFp16Configs[i]
                              : kThreeTf32Configs[i];
}

// The row of kThreeTf32PresplitConfigs with the tile and cluster of 3xTF32 configuration `config`, or -1.
constexpr int presplit_twin(int config) {
  const TileConfig& c = kThreeTf32Configs[config];
  for (int i = 0; i < count_of(kThreeTf32PresplitConfigs); ++i) {
    const TileConfig& p = kThreeTf32PresplitConfigs[i];
    if (p.tile_m == c.tile_m && p.tile_n == c.tile_n && p.tile_k == c.tile_k && p.cluster_m == c.cluster_m &&
        p.pingpong == c.pingpong)
      return i;
  }
  return -1;
}

struct Choice {
  int32_t kernel = FUSEDOPS_GEMM_CUBLASLT;  // fusedops_gemm_kernel
  Mode mode = Mode::TF32;                   // CUTLASS only
  int config = 0;                           // CUTLASS only: its row, config_of(mode, config)
  std::string why;                          // one line: why this kernel
};

// FUSEDOPS_OK with *out filled, FUSEDOPS_ERR_UNSUPPORTED (message in err) when the options force a kernel that
// cannot run this descriptor here, FUSEDOPS_ERR_INVALID_ARGUMENT for a descriptor that is not a complete GEMM one.
int choose(const fusedops_op_desc& d, const fusedops_gemm_device& dev, const fusedops_plan_options& o, Choice* out,
           char* err, size_t err_len);

// Workspace bytes any CUTLASS plan of `d` can need (the channel-reduction partials), 0 when no CUTLASS kernel can
// run it. A pure upper bound over every configuration, for fusedops_workspace_size.
size_t cutlass_workspace_bound(const fusedops_op_desc& d);

}  // namespace gemm_choice
}  // namespace fusedops
