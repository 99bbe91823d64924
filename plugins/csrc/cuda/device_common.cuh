// Device-side building blocks shared by every fusedops kernel: dtype loads/stores, the elementwise step table
// (one switch for every chain step), Welford/Chan statistics, channel reductions and a fast integer divider.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/step_formulas.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace cuda {

// ---- dtype conversion -------------------------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Per-channel parameters (gamma, beta, bias, extras) have their own dtype, read as float. The branch is uniform.
__device__ __forceinline__ float load_param(const void* p, int32_t dtype, int64_t i) {
  switch (dtype) {
    case FUSEDOPS_F16: return __half2float(__ldg(static_cast<const __half*>(p) + i));
    case FUSEDOPS_BF16: return __bfloat162float(__ldg(static_cast<const __nv_bfloat16*>(p) + i));
    default: return __ldg(static_cast<const float*>(p) + i);
  }
}

// VEC elements of T in one 16-byte (or smaller) transaction.
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Vec { T v[VEC]; };

template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[VEC]) {
  Vec<T, VEC> r = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_float(r.v[j]);
}
template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[VEC]) {
  Vec<T, VEC> r;
#pragma unroll
  for (int j = 0; j < VEC; ++j) r.v[j] = from_float<T>(in[j]);
  *reinterpret_cast<Vec<T, VEC>*>(p) = r;
}

// ---- the elementwise step table ---------------------------------------------------------------------------------
// Semantics follow PyTorch's CUDA kernels; comparisons are written so that NaN propagates (x < lo is false for NaN).
// Every step runs its spec formula (core/step_formulas.h) unless the spec lists a cuda override: those cases are
// written here.
__device__ __forceinline__ float apply_step(int32_t op, float x, float v, float a, float b) {
  switch (op) {
#define FUSEDOPS_FORMULA_CASE(E, FN) \
  case FUSEDOPS_STEP_##E: return ::fusedops::steps::FN(x, v, a, b);
    FUSEDOPS_CUDA_FORMULA_STEPS(FUSEDOPS_FORMULA_CASE)
#undef FUSEDOPS_FORMULA_CASE
    case FUSEDOPS_STEP_MISH: {
      // x * tanh(softplus(x)) with one exp, as the CPU kernels: tanh(log1p(e)) = n / (n + 2), n = e (e + 2). Above
      // PyTorch's softplus threshold (20) softplus(x) = x and tanh(x) rounds to 1: mish = x (and no inf / inf).
      const float e = expf(x);
      const float n = e * (e + 2.f);
      return x > 20.f ? x : x * __fdividef(n, n + 2.f);
    }
    default: return __int_as_float(0x7fffffff);  // unreachable: descriptors are checked on the host
  }
}

// GELU(x) = x * Phi(x) without erff: E = erfc(|x| / sqrt 2) = 2^q(|x|), q a degree-9 polynomial fitted (weighted
// minimax, float64) to log2(erfc(t / sqrt 2)) - (-t^2 / (2 ln 2)) on [0, 5.75]; then GELU = x (1 - E / 2) (x > 0) or
// x E / 2 (x <= 0). One polynomial, one ex2, no branch and no select chain (erff evaluates two polynomials and an
// exp). Fit error of E <= 5.5e-8 (float64 fit; plus ex2.approx's 2 ulp in float32). Measured on the H200: model 4's
// GELU+GroupNorm within 3.0e-6 of float64 (erff form 2.8e-6), and the GPU tests hold it to 1e-5 of the erff form;
// the exhaustive sweep over every float in [-10, 10] (tools/gelu_accuracy.cu, H200, 2026-11-27): max abs error
// 3.88e-7, 16.65 float32 ulp for x >= -3 (the erff form 4.86e-7, 195.69 ulp). The halving of E is folded into the
// polynomial's constant (q - 1: its fitted 3.1e-9 vanishes next to 1 in float32). Beyond |x| = 5.75 the polynomial
// stays at t = 5.75 while the Gaussian term keeps falling with the unclamped x^2, so E / 2 < 5e-9 goes on shrinking
// to 0 (x * x = inf gives ex2(-inf) = 0): x (x > 0) or a tiny x E / 2 / -0 / NaN for -inf (as PyTorch's 0.5 x (1 + erf)
// gives), without a select for the range; identical below 5.75.
//
// x (1 - E / 2) or x E / 2, with log2(E / 2) = r(t) - x^2 / (2 ln 2) and r the polynomial c (highest degree first)
// in t = min(|x|, 5.75): gelu_fast and gelu_fast16 differ only in c.
template <int D>
__device__ __forceinline__ float gelu_poly(float x, const float (&c)[D]) {
  const float t = fminf(fabsf(x), 5.75f);
  float r = c[0];
#pragma unroll
  for (int i = 1; i < D; ++i) r = fmaf(r, t, c[i]);
  const float q = fmaf(x * x, -0.72134752044448170f, r);  // log2(erfc(|x| / sqrt 2) / 2), <= -1
  float half_e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(half_e) : "f"(q));
  return x * (x > 0.f ? 1.f - half_e : half_e);  // +inf -> inf, -inf -> NaN (inf * 0), as the erff form
}
__device__ __forceinline__ float gelu_fast(float x) {
  // the fit's constant 3.112609503e-09 minus 1: log2(E / 2)
  constexpr float c[] = {5.068107498e-07f,  -9.472262718e-06f, 7.444982475e-05f, -2.826888813e-04f,
                         1.196350149e-05f,  6.934352685e-03f,  -5.243672431e-02f, 2.621266842e-01f,
                         -1.151104331e+00f, -1.f};
  return gelu_poly(x, c);
}

// gelu_fast for values stored as bfloat16 / float16 (the wgmma ConvTranspose epilogue): the same form with a
// degree-6 polynomial, fitted the same way but weighted to E's relative error where E / 2 > 1e-4 (tools/gelu_fit.py,
// 2026-11-27). Exhaustive over [-10, 10] on the H200 (tools/gelu_accuracy.cu): max abs error 3.88e-7, 0.0017
// bfloat16 ulp and 0.0137 float16 ulp of the result. Three FMAs a value fewer than gelu_fast.
__device__ __forceinline__ float gelu_fast16(float x) {
  // the fit's constant minus 1
  constexpr float c[] = {3.493142867e-05f,  -7.790462696e-04f, 8.083742112e-03f, -5.335419253e-02f,
                         2.624727190e-01f,  -1.151145935e+00f, -1.000000119e+00f};
  return gelu_poly(x, c);
}

// Per-channel operands of a chain: extras[k] (C elements each) in param dtype.
struct ExtraPtrs {
  const void* p[FUSEDOPS_MAX_EXTRAS];
};

// Chains are interpreted by small out-of-line functions: one copy of the step table per kernel instead of one per
// element of every unrolled loop (inlining it everywhere made 100-600 KB kernels that thrashed the instruction cache;
// see docs/kernels.md). Per step the switch is taken once for four values, and each case is straight-line code in
// which apply_step's switch folds away.
#define FUSEDOPS_STEP_CASE(OP)                                              \
  case OP:                                                                  \
    x.x = apply_step(OP, x.x, v.x, s.a, s.b);                               \
    x.y = apply_step(OP, x.y, v.y, s.a, s.b);                               \
    x.z = apply_step(OP, x.z, v.z, s.a, s.b);                               \
    x.w = apply_step(OP, x.w, v.w, s.a, s.b);                               \
    break;

__device__ __forceinline__ float4 apply_step4(const fusedops_step& s, float4 x, float4 v) {
  switch (s.op) {
#define FUSEDOPS_EVERY_STEP(E, ...) FUSEDOPS_STEP_CASE(FUSEDOPS_STEP_##E)
    FUSEDOPS_STEPS(FUSEDOPS_EVERY_STEP)
#undef FUSEDOPS_EVERY_STEP
    default: x = make_float4(__int_as_float(0x7fffffff), __int_as_float(0x7fffffff), __int_as_float(0x7fffffff),
                             __int_as_float(0x7fffffff));
  }
  return x;
}
#undef FUSEDOPS_STEP_CASE

// (`inline`: several translation units include this header, e.g. the CUTLASS kernels.)
// Four values of one channel c (uniform) ...
inline __device__ __noinline__ float4 chain4_channel(const fusedops_chain* ch, float4 x, int64_t c,
                                                     const ExtraPtrs* ex, int32_t param_dtype) {
  const int n = ch->num_steps;
  for (int i = 0; i < n; ++i) {
    const fusedops_step s = ch->steps[i];
    const float v = s.operand >= 0 ? load_param(ex->p[s.operand], param_dtype, c) : s.a;
    x = apply_step4(s, x, make_float4(v, v, v, v));
  }
  return x;
}
// ... or of consecutive channels c0 .. c0+3 (rows: every element its own channel).
inline __device__ __noinline__ float4 chain4_columns(const fusedops_chain* ch, float4 x, int64_t c0,
                                                     const ExtraPtrs* ex, int32_t param_dtype) {
  const int n = ch->num_steps;
  for (int i = 0; i < n; ++i) {
    const fusedops_step s = ch->steps[i];
    float4 v = make_float4(s.a, s.a, s.a, s.a);
    if (s.operand >= 0) {
      const void* e = ex->p[s.operand];
      v = make_float4(load_param(e, param_dtype, c0), load_param(e, param_dtype, c0 + 1),
                      load_param(e, param_dtype, c0 + 2), load_param(e, param_dtype, c0 + 3));
    }
    x = apply_step4(s, x, v);
  }
  return x;
}
inline __device__ __noinline__ float chain1(const fusedops_chain* ch, float x, int64_t c, const ExtraPtrs* ex,
                                            int32_t param_dtype) {
  const int n = ch->num_steps;
  for (int i = 0; i < n; ++i) {
    const fusedops_step s = ch->steps[i];
    const float v = s.operand >= 0 ? load_param(ex->p[s.operand], param_dtype, c) : s.a;
    x = apply_step(s.op, x, v, s.a, s.b);
  }
  return x;
}

// Apply a chain to VEC (1, 4 or 8) values in registers. COLUMNS: value j is channel c + j; else all are channel c.
template <int VEC, bool COLUMNS>
__device__ __forceinline__ void apply_chain(const fusedops_chain* ch, float (&x)[VEC], int64_t c, const ExtraPtrs* ex,
                                            int32_t param_dtype) {
  if (ch->num_steps == 0) return;
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int q = 0; q < VEC; q += 4) {
      float4 v = make_float4(x[q], x[q + 1], x[q + 2], x[q + 3]);
      v = COLUMNS ? chain4_columns(ch, v, c + q, ex, param_dtype) : chain4_channel(ch, v, c, ex, param_dtype);
      x[q] = v.x, x[q + 1] = v.y, x[q + 2] = v.z, x[q + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) x[j] = chain1(ch, x[j], COLUMNS ? c + j : c, ex, param_dtype);
  }
}

// Inlined interpreter for the hot row epilogue (the GEMM models): the step structs are read straight from the kernel's
// parameter space (no call, no generic-pointer loads), per-channel operands with one vector load per four channels.
// Callers keep a single copy of it per kernel (their loop is not unrolled) so the code stays small.
template <int VEC, bool COLUMNS>
__device__ __forceinline__ void apply_chain_inline(const fusedops_chain& ch, float (&x)[VEC], int64_t c,
                                                   const ExtraPtrs& ex, int32_t param_dtype) {
  const int n = ch.num_steps;
  for (int i = 0; i < n; ++i) {
    const fusedops_step s = ch.steps[i];
    if constexpr (VEC % 4 == 0) {
#pragma unroll
      for (int q = 0; q < VEC; q += 4) {
        float4 v = make_float4(s.a, s.a, s.a, s.a);
        if (s.operand >= 0) {
          if (COLUMNS) {
            float t[4];
            switch (param_dtype) {
              case FUSEDOPS_F16: load_vec<__half, 4>(static_cast<const __half*>(ex.p[s.operand]) + c + q, t); break;
              case FUSEDOPS_BF16:
                load_vec<__nv_bfloat16, 4>(static_cast<const __nv_bfloat16*>(ex.p[s.operand]) + c + q, t);
                break;
              default: load_vec<float, 4>(static_cast<const float*>(ex.p[s.operand]) + c + q, t); break;
            }
            v = make_float4(t[0], t[1], t[2], t[3]);
          } else {
            const float e = load_param(ex.p[s.operand], param_dtype, c);
            v = make_float4(e, e, e, e);
          }
        }
        float4 r = apply_step4(s, make_float4(x[q], x[q + 1], x[q + 2], x[q + 3]), v);
        x[q] = r.x, x[q + 1] = r.y, x[q + 2] = r.z, x[q + 3] = r.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float v = s.operand >= 0 ? load_param(ex.p[s.operand], param_dtype, COLUMNS ? c + j : c) : s.a;
        x[j] = apply_step(s.op, x[j], v, s.a, s.b);
      }
    }
  }
}

// Sum over the 32 lanes of a warp (every lane gets it).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- statistics: (count, mean, M2) combined with Chan's formula ----------------------------------------------
struct Welford {
  float n, mean, m2;
};
__device__ __forceinline__ Welford welford_combine(Welford a, Welford b) {
  const float n = a.n + b.n;
  if (n == 0.f) return a;
  const float delta = b.mean - a.mean;
  const float wb = __fdividef(b.n, n);  // a weight: 2-ulp division is plenty; b.n == 0 leaves a unchanged
  Welford r;
  r.n = n;
  r.mean = a.mean + delta * wb;
  r.m2 = a.m2 + b.m2 + delta * delta * a.n * wb;
  return r;
}
// Exact two-pass statistics of VEC values folded into a running state (one division per vector, not per value).
template <int VEC>
__device__ __forceinline__ void welford_add_vec(Welford& w, const float (&x)[VEC]) {
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < VEC; ++j) s += x[j];
  const float m = s * (1.f / VEC);
  float m2 = 0.f;
#pragma unroll
  for (int j = 0; j < VEC; ++j) m2 += (x[j] - m) * (x[j] - m);
  w = welford_combine(w, Welford{float(VEC), m, m2});
}
__device__ __forceinline__ Welford warp_welford(Welford w) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Welford b;
    b.n = __shfl_xor_sync(0xffffffffu, w.n, o);
    b.mean = __shfl_xor_sync(0xffffffffu, w.mean, o);
    b.m2 = __shfl_xor_sync(0xffffffffu, w.m2, o);
    w = welford_combine(w, b);
  }
  return w;
}
// Block-wide combine; every thread gets the result. blockDim.x is a multiple of 32, at most 1024.
__device__ __forceinline__ Welford block_welford(Welford w) {
  __shared__ Welford partial[32];
  __shared__ Welford result;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  w = warp_welford(w);
  if (lane == 0) partial[warp] = w;
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x >> 5;
    Welford v = lane < nw ? partial[lane] : Welford{0.f, 0.f, 0.f};
    v = warp_welford(v);
    if (lane == 0) result = v;
  }
  __syncthreads();
  return result;
}

// ---- channel reductions (min / max / sum / mean / logsumexp), NaN-propagating like torch ----------------------
struct RedState {
  float a;  // min / max / sum; logsumexp: running max
  float s;  // logsumexp: sum of exp(x - a)
};
__device__ __forceinline__ RedState red_init(int32_t op) {
  switch (op) {
    case FUSEDOPS_REDUCE_MIN: return {__int_as_float(0x7f800000), 0.f};   // +inf
    case FUSEDOPS_REDUCE_MAX: return {__int_as_float(0xff800000), 0.f};   // -inf
    case FUSEDOPS_REDUCE_LOGSUMEXP: return {__int_as_float(0xff800000), 0.f};
    default: return {0.f, 0.f};
  }
}
__device__ __forceinline__ RedState red_combine(int32_t op, RedState x, RedState y) {
  switch (op) {
    case FUSEDOPS_REDUCE_MIN: return {(y.a < x.a || isnan(y.a)) ? y.a : x.a, 0.f};
    case FUSEDOPS_REDUCE_MAX: return {(y.a > x.a || isnan(y.a)) ? y.a : x.a, 0.f};
    case FUSEDOPS_REDUCE_LOGSUMEXP: {
      if (isnan(x.a) || isnan(y.a)) return {__int_as_float(0x7fffffff), 0.f};
      const float m = x.a > y.a ? x.a : y.a;
      if (isinf(m)) return {m, 0.f};  // all -inf so far, or a +inf seen: the result is m
      return {m, x.s * expf(x.a - m) + y.s * expf(y.a - m)};
    }
    default: return {x.a + y.a, 0.f};
  }
}
__device__ __forceinline__ RedState red_value(int32_t op, float v) {
  return op == FUSEDOPS_REDUCE_LOGSUMEXP ? RedState{v, 1.f} : RedState{v, 0.f};
}
__device__ __forceinline__ float red_finish(int32_t op, RedState r, int64_t count) {
  if (op == FUSEDOPS_REDUCE_MEAN) return r.a / float(count);
  if (op == FUSEDOPS_REDUCE_LOGSUMEXP) return (isnan(r.a) || isinf(r.a)) ? r.a : r.a + logf(r.s);
  return r.a;
}
__device__ __forceinline__ RedState warp_red(int32_t op, RedState r) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    RedState b{__shfl_xor_sync(0xffffffffu, r.a, o), __shfl_xor_sync(0xffffffffu, r.s, o)};
    r = red_combine(op, r, b);
  }
  return r;
}

// ---- fast unsigned division by a runtime constant (Granlund-Montgomery, as in CUTLASS's FastDivmod) ----------
struct FastDiv {
  uint32_t d, mul, shift;
  __host__ void init(uint32_t divisor) {
    d = divisor;
    shift = 0;
    while ((uint64_t(1) << shift) < divisor) ++shift;
    mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - divisor)) / divisor + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    const uint32_t t = __umulhi(n, mul);
    return shift == 0 ? n : (t + ((n - t) >> 1)) >> (shift - 1);
  }
};

}  // namespace cuda
}  // namespace fusedops
