// The GroupNorm epilogue's fast path: one whole group at a time (groups of 8, 16 or 32 channels, i.e. S = 1, 2 or 4
// of a thread's 8-column quads). gn_epilogue.cuh's generic path walks the accumulators one quad at a time in three
// passes, so every quad pays a jump-table dispatch per pass, a chain-step dispatch per step and a dependent parameter
// load. Here a group's 4·S values are fetched once (one jump-table dispatch), each chain step is dispatched once for
// all of them, the statistics and the normalisation run on registers, and the next group's bias is loaded while this
// one computes (gamma and beta after the statistics), so the loads' latency is not paid in turn.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

#include "cuda/device_common.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

// Whether groups of cg channels take the whole-group walk (S = cg / 8 quads a group; other sizes the quad walk).
CUTLASS_HOST_DEVICE constexpr bool takes_whole_groups(int64_t cg) { return cg == 8 || cg == 16 || cg == 32; }

// Value i of a group is (quad i / 4, row half (i / 2) % 2, column parity i % 2): its channel is the group's first
// column of this thread + 8 (i / 4) + i % 2, i.e. per-channel operand k = 2 (i / 4) + i % 2.
template <int S>
CUTLASS_DEVICE constexpr int channel_slot(int i) {
  return 2 * (i / 4) + i % 2;
}

// This thread's 2·S channels of a group: c0 + 8 j + h (j < S, h < 2), read as float (0 for an absent pointer).
template <int S>
CUTLASS_DEVICE void group_params(const void* p, int32_t dtype, int64_t c0, bool valid, float (&out)[2 * S]) {
#pragma unroll
  for (int k = 0; k < 2 * S; ++k)
    out[k] = (p != nullptr && valid) ? load_param(p, dtype, c0 + 8 * (k / 2) + k % 2) : 0.f;
}

// One chain over a group's values: each step's switch is taken once for all 4·S values. (Taking it per quad, 4
// values in flight, did not lower ptxas's spills: measured 2026-11-26, 292 vs 280 bytes.)
#define FUSEDOPS_GROUP_STEP_CASE(E, ...)                                         \
  case FUSEDOPS_STEP_##E:                                                        \
    _Pragma("unroll") for (int i = 0; i < 4 * S; ++i) v[i] =                     \
        apply_step(FUSEDOPS_STEP_##E, v[i], o[channel_slot<S>(i)], s.a, s.b);    \
    break;
template <int S>
CUTLASS_DEVICE void group_chain(const fusedops_chain& ch, float (&v)[4 * S], int64_t c0, bool valid,
                                const ExtraPtrs& ex, int32_t param_dtype) {
  const int n = ch.num_steps;
  for (int i = 0; i < n; ++i) {
    const fusedops_step s = ch.steps[i];
    float o[2 * S];
    if (s.operand >= 0) {
      group_params<S>(ex.p[s.operand], param_dtype, c0, valid, o);
    } else {
#pragma unroll
      for (int k = 0; k < 2 * S; ++k) o[k] = s.a;
    }
    switch (s.op) {
      FUSEDOPS_STEPS(FUSEDOPS_GROUP_STEP_CASE)
      default:
#pragma unroll
        for (int k = 0; k < 4 * S; ++k) v[k] = __int_as_float(0x7fffffff);  // unreachable: checked on the host
    }
  }
}
#undef FUSEDOPS_GROUP_STEP_CASE

// r[0], r[1] (row, row + 8) summed over the 4 lanes of the quad, which hold a group's columns between them.
CUTLASS_DEVICE void quad_sum(float (&r)[2]) {
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    r[0] += __shfl_xor_sync(0xffffffffu, r[0], o);
    r[1] += __shfl_xor_sync(0xffffffffu, r[1], o);
  }
}

// Sum over the group's values of each row half, over the quad's 4 lanes. r[0]: row, r[1]: row + 8.
template <int S>
CUTLASS_DEVICE void group_row_sums(const float (&x)[4 * S], float (&r)[2]) {
  r[0] = r[1] = 0.f;
#pragma unroll
  for (int i = 0; i < 4 * S; ++i) r[(i / 2) % 2] += x[i];
  quad_sum(r);
}

// Sum of (x - mean[row half])^2 over the group's values of each row half, over the quad's 4 lanes.
template <int S>
CUTLASS_DEVICE void group_row_square_deviations(const float (&x)[4 * S], const float (&mean)[2], float (&r)[2]) {
  r[0] = r[1] = 0.f;
#pragma unroll
  for (int i = 0; i < 4 * S; ++i) {
    const float d = x[i] - mean[(i / 2) % 2];
    r[(i / 2) % 2] += d * d;
  }
  quad_sum(r);
}

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
