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

// The configurations built for a mode, the default first; *count receives how many.
const TileConfig* configs(Mode mode, int* count);

struct Choice {
  int32_t kernel = FUSEDOPS_GEMM_CUBLASLT;  // fusedops_gemm_kernel
  Mode mode = Mode::TF32;                   // CUTLASS only
  int config = 0;                           // CUTLASS only: index into configs(mode)
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
