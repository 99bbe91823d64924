// GroupNorm inside the GEMM: a CUTLASS collective epilogue for the sm_90 warp-specialised kernels that takes the
// fp32 accumulators of an output tile straight from the registers of the math warp groups and does, in order:
// bias, the `pre` chain, per-(row, group) statistics (exact two-pass: mean, then the sum of squared deviations, all
// in registers: no E[x^2] - E[x]^2 cancellation), normalisation (x - mean) * (rstd * gamma) + beta, the `post`
// chain, then one store of Y, or (with a channel reduction) a per-(tile column, row) partial that
// reduce_finish.cu combines into Y (M, 1).
//
// Why this works without any cross-tile exchange: a group of Cg consecutive channels lies inside one output tile
// when the tile's N extent is a multiple of Cg (the planner checks; see gemm_choice.cpp), and inside the tile the
// wgmma accumulator layout (PTX ISA "wgmma register fragment D", CuTe's CLayout_64xN) gives thread t of a warp group
// the rows 16*(warp) + lane/4 and +8, and in every 8-column block j the columns 8j + 2*(lane%4) + {0,1}. So a row's
// values are spread over the 4 lanes of one quad: a group's sum is an in-thread sum plus xor-shuffles over lanes 1
// and 2 (Cg >= 8), over lane 1 (Cg = 4) or none (Cg = 1, 2). The tile's rows are never split between warps.
//
// Register budget: the accumulators (128 floats a thread for the 128x256 / 64x256 tiles) stay where the mainloop
// left them. The epilogue walks them one "quad" (one 8-column block j: 2 columns x 2 rows, 4 values) at a time in
// loops that are not unrolled, fetching a quad through a jump table over j (a dynamic index into the accumulator
// array would put it in local memory), so the chain interpreters are inlined once each and the code stays small.
// Groups of 8, 16 or 32 channels take the faster whole-group walk instead (gn_epilogue_group.cuh, whole_groups()).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>

#include <type_traits>

#include "cuda/cutlass/gn_epilogue_group.cuh"
#include "cuda/device_common.cuh"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

// Everything the epilogue reads; pointers are filled per run, the rest once per plan.
struct GnEpilogueParams {
  void* y = nullptr;            // (M, C) row-major output; unused with a reduction
  RedState* partials = nullptr;  // reduction: [ceil(C / tile N)][M] partial states (workspace)
  const void* bias = nullptr;   // C elements of param_dtype, or null
  const void* gamma = nullptr;
  const void* beta = nullptr;
  ExtraPtrs ex{};
  fusedops_chain pre{};
  fusedops_chain post{};
  int64_t M = 0, C = 0;
  int32_t cg = 1;      // channels a group: 1, 2, 4 or a multiple of 8 dividing the tile's N
  int32_t reduce = 0;  // fusedops_reduce
  int32_t param_dtype = FUSEDOPS_F32;
  float eps = 0.f;
  float inv_cg = 1.f;
};

// f(k) for the static k == q (< NQ) through a jump table: each case names its registers (the 4 accumulators of quad q,
// or those of group q in the whole-group walk); a dynamic index into the accumulator array would put it in local
// memory.
#define FUSEDOPS_QUAD_CASE(k)                                     \
  case k:                                                         \
    if constexpr ((k) < NQ) f(std::integral_constant<int, (k)>{}); \
    break;
template <int NQ, class F>
CUTLASS_DEVICE void with_static_quad(int q, F&& f) {
  static_assert(NQ <= 32, "the jump table covers 32 quads (128 accumulators a thread)");
  switch (q) {
    FUSEDOPS_QUAD_CASE(0) FUSEDOPS_QUAD_CASE(1) FUSEDOPS_QUAD_CASE(2) FUSEDOPS_QUAD_CASE(3)
    FUSEDOPS_QUAD_CASE(4) FUSEDOPS_QUAD_CASE(5) FUSEDOPS_QUAD_CASE(6) FUSEDOPS_QUAD_CASE(7)
    FUSEDOPS_QUAD_CASE(8) FUSEDOPS_QUAD_CASE(9) FUSEDOPS_QUAD_CASE(10) FUSEDOPS_QUAD_CASE(11)
    FUSEDOPS_QUAD_CASE(12) FUSEDOPS_QUAD_CASE(13) FUSEDOPS_QUAD_CASE(14) FUSEDOPS_QUAD_CASE(15)
    FUSEDOPS_QUAD_CASE(16) FUSEDOPS_QUAD_CASE(17) FUSEDOPS_QUAD_CASE(18) FUSEDOPS_QUAD_CASE(19)
    FUSEDOPS_QUAD_CASE(20) FUSEDOPS_QUAD_CASE(21) FUSEDOPS_QUAD_CASE(22) FUSEDOPS_QUAD_CASE(23)
    FUSEDOPS_QUAD_CASE(24) FUSEDOPS_QUAD_CASE(25) FUSEDOPS_QUAD_CASE(26) FUSEDOPS_QUAD_CASE(27)
    FUSEDOPS_QUAD_CASE(28) FUSEDOPS_QUAD_CASE(29) FUSEDOPS_QUAD_CASE(30) FUSEDOPS_QUAD_CASE(31)
    default: break;
  }
}
#undef FUSEDOPS_QUAD_CASE

// A chain on one quad: values 0, 2 are channel c, values 1, 3 channel c + 1. Per-channel operands are read only
// for valid channels (the last tile along C may hang over the end).
CUTLASS_DEVICE void chain_quad(const fusedops_chain& ch, float (&v)[4], int64_t c, bool valid, const ExtraPtrs& ex,
                               int32_t param_dtype) {
  const int n = ch.num_steps;
  for (int i = 0; i < n; ++i) {
    const fusedops_step s = ch.steps[i];
    float o0 = s.a, o1 = s.a;
    if (s.operand >= 0) {
      o0 = valid ? load_param(ex.p[s.operand], param_dtype, c) : 0.f;
      o1 = valid ? load_param(ex.p[s.operand], param_dtype, c + 1) : 0.f;
    }
    const float4 r = apply_step4(s, make_float4(v[0], v[1], v[2], v[3]), make_float4(o0, o1, o0, o1));
    v[0] = r.x, v[1] = r.y, v[2] = r.z, v[3] = r.w;
  }
}

// Sums of a (row, group) over the lanes that share it; s[v0] is this thread's part for column parity v0.
CUTLASS_DEVICE void group_sum(float (&s)[2], int cg) {
  if (cg >= 2) s[0] = s[1] = s[0] + s[1];
  const int lanes = cg >= 8 ? 4 : cg == 4 ? 2 : 1;  // uniform: every lane takes the same trip count
  for (int o = 1; o < lanes; o <<= 1) {
    s[0] += __shfl_xor_sync(0xffffffffu, s[0], o);
    s[1] += __shfl_xor_sync(0xffffffffu, s[1], o);
  }
}

template <typename T>
CUTLASS_DEVICE void store_pair(T* p, float a, float b) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
  } else if constexpr (std::is_same_v<T, __half>) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
  }
}

// CUTLASS element types of the output and the CUDA types the stores use.
template <class E> struct StorageOf { using type = E; };
template <> struct StorageOf<cutlass::half_t> { using type = __half; };
template <> struct StorageOf<cutlass::bfloat16_t> { using type = __nv_bfloat16; };

// The collective epilogue (operator-style: Sm90TmaWarpSpecializedAdapter wraps it for the sm_90 kernels, as CUTLASS
// does for its own DefaultEpilogue). ElementD_ is the output's CUTLASS element type.
template <class ElementD_>
class GnEpilogue {
 public:
  using ElementD = ElementD_;
  using ElementC = ElementD_;  // no source tensor C is read
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using StrideD = StrideC;
  using ElementAccumulator = float;
  using Arguments = GnEpilogueParams;
  using Params = GnEpilogueParams;
  struct SharedStorage {};
  using TensorStorage = SharedStorage;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& a) {
    return a.cg >= 1 && (a.cg <= 2 || a.cg == 4 || a.cg % 8 == 0) && a.C % 2 == 0;
  }

  // Keeps a reference: the kernel's parameters live in its __grid_constant__ parameter space, where the chain steps
  // are read with constant-bank loads (a copy would go to local memory, as the steps are indexed at run time).
  CUTLASS_HOST_DEVICE explicit GnEpilogue(Params const& p, SharedStorage const& = SharedStorage()) : p_(p) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL, BlockShapeMNK blk_shape, BlockCoordMNKL blk_coord,
                                 cute::Tensor<FrgEngine, FrgLayout>& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char*) {
    using namespace cute;
    using T = typename StorageOf<ElementD>::type;
    static_assert(is_static<FrgLayout>::value, "accumulator layout must be static");
    // One wgmma atom covers the warp group's tile: fragment ((2, 2, N/8), 1, 1) (see the header comment).
    static_assert(size<1>(FrgLayout{}) == 1 && size<2>(FrgLayout{}) == 1,
                  "the GroupNorm epilogue expects one wgmma atom a warp group along M and N");
    constexpr int NQ = decltype(size(acc))::value / 4;

    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor cD = make_identity_tensor(make_shape(size<0>(blk_shape), size<1>(blk_shape)));  // tile (m, n)
    Tensor tCcD = thr_mma.partition_C(cD);
    const auto first = tCcD(0);  // this thread's first row and column inside the tile
    const int64_t tile_n = int64_t(get<1>(blk_coord));
    const int64_t row0 = int64_t(get<0>(blk_coord)) * size<0>(blk_shape) + get<0>(first);
    const int64_t col0 = tile_n * size<1>(blk_shape) + get<1>(first);
    const bool row_in[2] = {row0 < p_.M, row0 + 8 < p_.M};
    const int cg = p_.cg;
    const int span = cg >= 8 ? cg / 8 : 1;  // quads a group spans (in this thread's columns)
    const bool modify = p_.bias != nullptr || p_.pre.num_steps > 0;
    const bool reduce = p_.reduce != FUSEDOPS_REDUCE_NONE;
    RedState red[2] = {red_init(p_.reduce), red_init(p_.reduce)};

    auto get = [&](int q, float(&v)[4]) {
      with_static_quad<NQ>(q, [&](auto k) {
        constexpr int b = 4 * decltype(k)::value;
        v[0] = acc(b), v[1] = acc(b + 1), v[2] = acc(b + 2), v[3] = acc(b + 3);
      });
    };
    auto put = [&](int q, const float(&v)[4]) {
      with_static_quad<NQ>(q, [&](auto k) {
        constexpr int b = 4 * decltype(k)::value;
        acc(b) = v[0], acc(b + 1) = v[1], acc(b + 2) = v[2], acc(b + 3) = v[3];
      });
    };
    // Per-channel parameters of quad q's two columns (0 past C). Loaded one quad ahead of their use, so the loop
    // (not unrolled) does not wait for each load in turn.
    auto params_of = [&](const void* ptr, int q, float(&out)[2]) {
      group_params<1>(ptr, p_.param_dtype, col0 + 8 * q, col0 + 8 * q < p_.C, out);
    };

    // Groups of 8 / 16 / 32 channels (takes_whole_groups): the whole-group walk; the branch is uniform.
    if constexpr (NQ % 4 == 0) {
      if (cg == 32) return whole_groups<4, NQ / 4>(acc, row0, col0, tile_n, size<1>(blk_shape), row_in);
    }
    if constexpr (NQ % 2 == 0) {
      if (cg == 16) return whole_groups<2, NQ / 2>(acc, row0, col0, tile_n, size<1>(blk_shape), row_in);
    }
    if (cg == 8) return whole_groups<1, NQ>(acc, row0, col0, tile_n, size<1>(blk_shape), row_in);
#pragma unroll 1
    for (int q0 = 0; q0 < NQ; q0 += span) {
      // Pass 1: bias and pre, written back; row sums. s[r][v0]: row r (+8 r), column parity v0.
      float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
      float bias_next[2];
      params_of(p_.bias, q0, bias_next);
#pragma unroll 1
      for (int q = q0; q < q0 + span; ++q) {
        float v[4];
        get(q, v);
        const int64_t c = col0 + 8 * q;
        const bool cv = c < p_.C;
        const float b0 = bias_next[0], b1 = bias_next[1];
        if (q + 1 < q0 + span) params_of(p_.bias, q + 1, bias_next);
        if (modify) {
          v[0] += b0, v[1] += b1, v[2] += b0, v[3] += b1;  // 0 without a bias
          chain_quad(p_.pre, v, c, cv, p_.ex, p_.param_dtype);
          put(q, v);
        }
        s[0][0] += v[0], s[0][1] += v[1], s[1][0] += v[2], s[1][1] += v[3];
      }
      float mean[2][2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        group_sum(s[r], cg);
        mean[r][0] = s[r][0] * p_.inv_cg, mean[r][1] = s[r][1] * p_.inv_cg;
      }
      // Pass 2: sums of squared deviations from the exact mean (pass 3's first gamma / beta load meanwhile).
      float g_next[2], e_next[2];
      params_of(p_.gamma, q0, g_next);
      params_of(p_.beta, q0, e_next);
      float m2[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll 1
      for (int q = q0; q < q0 + span; ++q) {
        float v[4];
        get(q, v);
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float d = v[2 * r + h] - mean[r][h];
            m2[r][h] += d * d;
          }
      }
      float rstd[2][2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        group_sum(m2[r], cg);
        rstd[r][0] = rsqrtf(m2[r][0] * p_.inv_cg + p_.eps), rstd[r][1] = rsqrtf(m2[r][1] * p_.inv_cg + p_.eps);
      }
      // Pass 3: normalise, post, store (or fold into the row's partial reduction).
#pragma unroll 1
      for (int q = q0; q < q0 + span; ++q) {
        float v[4];
        get(q, v);
        const int64_t c = col0 + 8 * q;
        const bool cv = c < p_.C;
        const float g0 = g_next[0], g1 = g_next[1], e0 = e_next[0], e1 = e_next[1];
        if (q + 1 < q0 + span) {
          params_of(p_.gamma, q + 1, g_next);
          params_of(p_.beta, q + 1, e_next);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          v[2 * r] = (v[2 * r] - mean[r][0]) * (rstd[r][0] * g0) + e0;
          v[2 * r + 1] = (v[2 * r + 1] - mean[r][1]) * (rstd[r][1] * g1) + e1;
        }
        chain_quad(p_.post, v, c, cv, p_.ex, p_.param_dtype);
        if (!cv) continue;
        if (!reduce) {
          T* y = static_cast<T*>(p_.y);
#pragma unroll
          for (int r = 0; r < 2; ++r)
            if (row_in[r]) store_pair(y + (row0 + 8 * r) * p_.C + c, v[2 * r], v[2 * r + 1]);
        } else {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            red[r] = red_combine(p_.reduce, red[r], red_value(p_.reduce, v[2 * r]));
            red[r] = red_combine(p_.reduce, red[r], red_value(p_.reduce, v[2 * r + 1]));
          }
        }
      }
    }
    if (reduce) publish_partials(red, row0, tile_n, size<1>(blk_shape), row_in);
  }

 private:
  // The row's 4 lanes hold all of its columns in this tile: combine them; lane 0 of the quad publishes the tile's
  // partial (a tile past C has no partial slot).
  CUTLASS_DEVICE void publish_partials(RedState (&red)[2], int64_t row0, int64_t tile_n, int64_t tile_cols,
                                       const bool (&row_in)[2]) const {
    if (tile_n * tile_cols >= p_.C) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int o = 1; o < 4; o <<= 1) {
        const RedState b{__shfl_xor_sync(0xffffffffu, red[r].a, o), __shfl_xor_sync(0xffffffffu, red[r].s, o)};
        red[r] = red_combine(p_.reduce, red[r], b);
      }
      if ((threadIdx.x & 3) == 0 && row_in[r]) p_.partials[tile_n * p_.M + row0 + 8 * r] = red[r];
    }
  }

  // Groups of 8·S channels, one at a time (NG of them in this thread's columns); see gn_epilogue_group.cuh.
  template <int S, int NG, class Acc>
  CUTLASS_DEVICE void whole_groups(const Acc& acc, int64_t row0, int64_t col0, int64_t tile_n, int64_t tile_cols,
                                   const bool (&row_in)[2]) const {
    using T = typename StorageOf<ElementD>::type;
    constexpr int V = 4 * S;
    const bool modify = p_.bias != nullptr || p_.pre.num_steps > 0;
    const bool reduce = p_.reduce != FUSEDOPS_REDUCE_NONE;
    const int32_t pd = p_.param_dtype;
    RedState red[2] = {red_init(p_.reduce), red_init(p_.reduce)};
    // A group lies wholly inside C or wholly past it (C is a multiple of the group size): one validity a group,
    // the same for every lane of the warp (all lanes share the quads' column blocks). Registers are what limits
    // this loop (the 128 accumulators stay live through it): the bias is loaded one group ahead, gamma and beta
    // only after the statistics (every warp of the tile reads the same channels, so they are mostly L1 hits).
    T* const y_rows[2] = {static_cast<T*>(p_.y) + row0 * p_.C, static_cast<T*>(p_.y) + (row0 + 8) * p_.C};
    float bias_n[2 * S];
    group_params<S>(p_.bias, pd, col0, col0 < p_.C, bias_n);
#pragma unroll 1
    for (int g = 0; g < NG; ++g) {
      const int64_t c0 = col0 + 8 * S * g;
      const bool valid = c0 < p_.C;
      float v[V];
      with_static_quad<NG>(g, [&](auto k) {  // the group's 4·S accumulators, through the jump table over g
        constexpr int b = 4 * S * decltype(k)::value;
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = acc(b + i);
      });
      if (modify) {
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] += bias_n[channel_slot<S>(i)];  // 0 without a bias
      }
      if (g + 1 < NG) {
        const int64_t c1 = c0 + 8 * S;
        group_params<S>(p_.bias, pd, c1, c1 < p_.C, bias_n);
      }
      if (!valid) continue;  // warp-uniform
      if (modify) group_chain<S>(p_.pre, v, c0, valid, p_.ex, pd);
      // Exact two-pass statistics over the group's 8·S channels of each row (the quad's 4 lanes hold them all).
      float mean[2], rstd[2];
      group_row_sums<S>(v, mean);
      mean[0] *= p_.inv_cg, mean[1] *= p_.inv_cg;
      group_row_square_deviations<S>(v, mean, rstd);
      rstd[0] = rsqrtf(rstd[0] * p_.inv_cg + p_.eps), rstd[1] = rsqrtf(rstd[1] * p_.inv_cg + p_.eps);
      {
        float gamma[2 * S], beta[2 * S];
        group_params<S>(p_.gamma, pd, c0, valid, gamma);
        group_params<S>(p_.beta, pd, c0, valid, beta);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const int r = (i / 2) % 2, k = channel_slot<S>(i);
          v[i] = (v[i] - mean[r]) * (rstd[r] * gamma[k]) + beta[k];
        }
      }
      group_chain<S>(p_.post, v, c0, valid, p_.ex, pd);
      if (!reduce) {
#pragma unroll
        for (int j = 0; j < S; ++j)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            if (row_in[r]) store_pair(y_rows[r] + c0 + 8 * j, v[4 * j + 2 * r], v[4 * j + 2 * r + 1]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const int r = (i / 2) % 2;
          red[r] = red_combine(p_.reduce, red[r], red_value(p_.reduce, v[i]));
        }
      }
    }
    if (reduce) publish_partials(red, row0, tile_n, tile_cols, row_in);
  }

  Params const& p_;
};

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
