// Internal to convt_gn.cu: the building blocks of ConvTransposeGroupNormAct's convolution kernel — the tile shape, the
// kernel's parameters, cp.async staging of X and the packed weights, the gather tables' column rule, and one stage's
// tensor-core MMAs. Included by convt_gn.cu only (an unnamed namespace: its definitions are that file's own).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/device_common.cuh"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace cuda {
namespace {

// Block tile: kTR output rows x kTM output columns (M = 256 pixels) x kTN output channels of one convolution group.
// 8 warps: (row of the tile) x (half of the columns) x (half of the channels), each 64 pixels x 32 channels; two
// blocks a multiprocessor (128 registers, ~90 KB of shared memory each). (Measured on the H200: 4 warps of 64 x 64
// need fewer fragment loads but leave 8 warps a multiprocessor, too few to hide the epilogue's latencies.)
constexpr int kTM = 128;
constexpr int kTR = 2;
constexpr int kTN = 64;
constexpr int kKC = 8;        // input channels per pipeline stage (one k8 step of every tap)
constexpr int kThreads = 256;
constexpr int kStages = 2;    // cp.async double buffering
constexpr int kNormThreads = 256;
constexpr size_t kAlignWs = 256;
constexpr int kLdw = kTN + 8;  // weight row stride: = 8 (mod 32) floats, conflict-free fragment loads

__host__ __device__ inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ inline int ceil_div_int(int a, int b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// How the kernel feeds the tensor cores: TF32 rounds float32 X at use (W is rounded when packed); THREE splits both
// into TF32 high and low parts (3xTF32); EXACT is for 16-bit X, whose values are TF32 already.
enum class Mode { TF32, THREE, EXACT };

struct ConvtParams {
  const void* x;
  const void* w;
  const void* bias;
  const void* gamma;
  const void* beta;
  ExtraPtrs ex;
  void* y;
  const float* wp;    // packed weights [conv group][tap][cin_g][cout_gp] (pack_weights_kernel)
  Welford* partials;  // [N][G][pixel blocks][channel tiles]
  float2* stats;      // [N][G]: (mean, rstd)
  fusedops_chain pre, post;
  int32_t param_dtype;
  int32_t cin, cout, cin_g, cout_g, cout_gp, groups;  // channels; per convolution group; padded to kTN
  int32_t hin, win, hout, wout;
  int32_t kh, kw, sh, sw, ph, pw, dh, dw;
  int32_t G, Cg;                       // GroupNorm groups and channels a group
  int32_t tiles_h, tiles_w, tiles_c;   // row tiles, column tiles, channel tiles (all convolution groups)
  int32_t rows_in;                     // input rows a row tile can reach
  int32_t span, ldx, plane;            // staged input columns (+ one zero column), row stride, channel stride
  int32_t x_vec4;                      // 1: X rows are 16-byte aligned (float32, width % 4 == 0)
  int32_t stage_floats;                // one stage: X [kKC][plane] then W [taps][kKC][kLdw]
  int32_t xi;                          // vec4: X copy items per thread (the block's copy table, xtab)
  float eps;
};

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// W (Cin, C / groups, KH, KW) -> [conv group][tap][cin_g][cout_gp] float32, channels padded with zeros to whole
// channel tiles; TF32-rounded once here in TF32 mode (3xTF32 splits at use; 16-bit values are exact).
template <typename T, Mode M>
__global__ void pack_weights_kernel(const __grid_constant__ ConvtParams p) {
  const int taps = p.kh * p.kw;
  const int64_t total = int64_t(p.groups) * taps * p.cin_g * p.cout_gp;
  const T* __restrict__ w = static_cast<const T*>(p.w);
  float* wp = const_cast<float*>(p.wp);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int co = int(i % p.cout_gp);
    int64_t r = i / p.cout_gp;
    const int ci = int(r % p.cin_g);
    r /= p.cin_g;
    const int tap = int(r % taps);
    const int cg = int(r / taps);
    float v = 0.f;
    if (co < p.cout_g) v = to_float(w[((int64_t(cg) * p.cin_g + ci) * p.cout_g + co) * taps + tap]);
    wp[i] = M == Mode::TF32 ? __uint_as_float(to_tf32(v)) : v;
  }
}

// One pipeline stage: input channels [c0, c0 + kKC) of every input row the row tile reaches, and their weights.
// Input columns outside X and rows outside X are not staged: the fragment loads never read them (absent columns
// read the zero column, absent rows are skipped per warp). Channels past cin_g are zeros (their weights are too,
// but 0 * NaN from stale shared memory would not be).
template <typename T>
__device__ __forceinline__ void stage_load(const ConvtParams& p, float* xs, float* ws, const int2* xtab, int n, int cg,
                                           int c0, int ih_lo, int iw_lo, int co_local0) {
  const int tid = threadIdx.x;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const int64_t plane_in = int64_t(p.hin) * p.win;
  const T* xg = x + (int64_t(n) * p.cin + int64_t(cg) * p.cin_g + c0) * plane_in;
  const int kvalid = min(kKC, p.cin_g - c0);
  if (p.x_vec4) {  // float32, width % 4 == 0: the block's copy table, one 16-byte copy per entry
    for (int j = 0; j < p.xi; ++j) {
      const int2 e = xtab[j * kThreads + tid];
      if (e.x < 0) continue;
      float* dst = xs + (e.x & 0xffff);
      if ((e.x >> 16) < kvalid) cp_async16(dst, xg + e.y);
      else *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  } else {
    const int lane = tid & 31, warp = tid >> 5;
    for (int rs = warp; rs < kKC * p.rows_in; rs += kThreads / 32) {  // one (channel, slot) row per warp
      const int k = rs / p.rows_in, slot = rs - k * p.rows_in;
      const int ih = ih_lo + slot;
      float* row = xs + k * p.plane + slot * p.ldx;
      if (k >= kvalid) {
        for (int j = lane; j < p.ldx - 1; j += 32) row[j] = 0.f;
        continue;
      }
      if (ih < 0 || ih >= p.hin) continue;  // a row no warp of this tile reads
      const T* src = xg + int64_t(k) * plane_in + int64_t(ih) * p.win;
      for (int j = lane; j < p.span; j += 32) {
        const int iw = iw_lo + j;
        if (iw < 0 || iw >= p.win) continue;
        if constexpr (sizeof(T) == 4) cp_async4(row + j, src + iw);
        else row[j] = to_float(src[iw]);  // 16-bit X: converted while staged (cp.async cannot widen)
      }
    }
  }
  // W: thread -> (channel k of the chunk, 4 output channels q), taps strided by the block: affine addresses.
  static_assert(kThreads % (kKC * kTN / 4) == 0, "the weight copy map needs whole (k, q) sets");
  constexpr int kTapStep = kThreads / (kKC * kTN / 4);
  const int taps = p.kh * p.kw;
  const int wq = tid % (kTN / 4), wk = (tid / (kTN / 4)) % kKC;
  const float* wsrc = p.wp + (int64_t(cg) * taps * p.cin_g + c0 + wk) * p.cout_gp + co_local0 + 4 * wq;
  const int64_t wstep = int64_t(kTapStep) * p.cin_g * p.cout_gp;
  float* wdst = ws + wk * kLdw + 4 * wq;
  int tap = tid / (kKC * kTN / 4);
  wsrc += int64_t(tap) * p.cin_g * p.cout_gp;
  wdst += tap * kKC * kLdw;
  for (; tap < taps; tap += kTapStep, wsrc += wstep, wdst += kTapStep * kKC * kLdw) {
    if (wk < kvalid) cp_async16(wdst, wsrc);
    else *reinterpret_cast<float4*>(wdst) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// TF32 mode: rounds, in place, the X values this thread copied into the stage (visible to it after its cp.async
// wait; the block barrier that follows publishes them). Each value is read by every tap and both channel halves,
// so rounding once here replaces 18 roundings at use.
__device__ __forceinline__ void round_stage_tf32(const ConvtParams& p, float* xs, const int2* xtab, int c0,
                                                 int ih_lo, int iw_lo) {
  const int kvalid = min(kKC, p.cin_g - c0);
  if (p.x_vec4) {
    for (int j = 0; j < p.xi; ++j) {
      const int2 e = xtab[j * kThreads + threadIdx.x];
      if (e.x < 0 || (e.x >> 16) >= kvalid) continue;
      float4* q = reinterpret_cast<float4*>(xs + (e.x & 0xffff));
      float4 v = *q;
      v.x = __uint_as_float(to_tf32(v.x)), v.y = __uint_as_float(to_tf32(v.y));
      v.z = __uint_as_float(to_tf32(v.z)), v.w = __uint_as_float(to_tf32(v.w));
      *q = v;
    }
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int rs = warp; rs < kKC * p.rows_in; rs += kThreads / 32) {
    const int k = rs / p.rows_in, slot = rs - k * p.rows_in;
    const int ih = ih_lo + slot;
    if (k >= kvalid || ih < 0 || ih >= p.hin) continue;
    float* row = xs + k * p.plane + slot * p.ldx;
    for (int j = lane; j < p.span; j += 32) {
      const int iw = iw_lo + j;
      if (iw >= 0 && iw < p.win) row[j] = __uint_as_float(to_tf32(row[j]));
    }
  }
}

// Stage column of output column ow for tap kw, or `zero` (the stage's zero column) where the tap reads no input.
__device__ __forceinline__ int col_of(const ConvtParams& p, int ow, int kw, int iw_base, int zero) {
  const int num = ow + p.pw - kw * p.dw;
  if (p.sw == 1) return (num >= 0 && num < p.win) ? num - iw_base : zero;
  const int q = num >= 0 ? num / p.sw : -1;
  return (num >= 0 && q * p.sw == num && q < p.win) ? q - iw_base : zero;
}

// Whether channel tile ct (kTN output channels of one convolution group, tiles_per_group = ceil(cout_g / kTN) a
// group) holds channels of GroupNorm group g: only those tiles' partials count toward g's statistics.
__device__ __forceinline__ bool tile_holds_group(const ConvtParams& p, int ct, int g, int tiles_per_group) {
  const int cg = ct / tiles_per_group, lo = cg * p.cout_g + (ct % tiles_per_group) * kTN;
  const int hi = min(lo + kTN, (cg + 1) * p.cout_g);
  return hi > g * p.Cg && lo < (g + 1) * p.Cg;
}

// The high TF32 part of a staged value: TF32 and EXACT stages hold TF32 values already (round_stage_tf32).
template <Mode M>
__device__ __forceinline__ uint32_t hi_bits(float v) {
  return M == Mode::THREE ? to_tf32(v) : __float_as_uint(v);
}

// Four consecutive values of Y (`valid` of them exist; src aligned to four elements when valid == 4).
template <typename T>
__device__ __forceinline__ void load4(const T* src, float (&v)[4], int valid) {
  if (valid >= 4) {
    if constexpr (sizeof(T) == 4) {
      const float4 q = *reinterpret_cast<const float4*>(src);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
      union { uint2 u; T h[4]; } pk;
      pk.u = *reinterpret_cast<const uint2*>(src);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = to_float(pk.h[j]);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = j < valid ? to_float(src[j]) : 0.f;
}

// Four consecutive values into Y (`valid` of them exist): one vector store where dst is aligned for it.
template <typename T>
__device__ __forceinline__ void store4(T* dst, const float (&v)[4], int valid) {
  if (valid >= 4) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
    if constexpr (sizeof(T) == 4) {
      if (a % 16 == 0) {
        *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
        return;
      }
      if (a % 8 == 0) {
        reinterpret_cast<float2*>(dst)[0] = make_float2(v[0], v[1]);
        reinterpret_cast<float2*>(dst)[1] = make_float2(v[2], v[3]);
        return;
      }
    } else {
      union { T h[4]; uint2 u; } pk;
#pragma unroll
      for (int j = 0; j < 4; ++j) pk.h[j] = from_float<T>(v[j]);
      if (a % 8 == 0) {
        *reinterpret_cast<uint2*>(dst) = pk.u;
        return;
      }
      if (a % 4 == 0) {
        reinterpret_cast<uint32_t*>(dst)[0] = pk.u.x;
        reinterpret_cast<uint32_t*>(dst)[1] = pk.u.y;
        return;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (j < valid) dst[j] = from_float<T>(v[j]);
}

__device__ __forceinline__ float at(const char* base, int byte_offset) {
  return *reinterpret_cast<const float*>(base + byte_offset);
}

// One stage's MMAs of one warp: every tap, MT m-tiles (16 columns) x 4 n-tiles (32 channels), one k8 step
// (kKC = 8 input channels). LINEAR (column stride 1): output column m of tap kw reads stage column m + a constant,
// every column of the span is staged (zeros outside X), so each fragment load is one base pointer plus an immediate;
// else the column table gives each column's offset (the zero column where the tap reads no input).
template <int MT, Mode M, bool LINEAR>
__device__ __forceinline__ void stage_mma(const ConvtParams& p, const float* xs, const float* ws, const int* colt,
                                          const int* rowt, int lin0, int wc, int wn, int g8, int t4,
                                          float (&acc)[4][4][4]) {
  for (int kw = 0; kw < p.kw; ++kw) {
    int col[MT][2];
    if constexpr (!LINEAR) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) col[mt][h] = colt[kw * kTM + wc + mt * 16 + g8 + h * 8];
    }
    for (int kh = 0; kh < p.kh; ++kh) {
      const int slot = rowt[kh];
      if (slot < 0) continue;  // warp-uniform
      const float* r0 = xs + t4 * p.plane + slot * p.ldx + (LINEAR ? lin0 - kw * p.dw : 0);
      const float* r4 = r0 + 4 * p.plane;
      const float* wk = ws + ((kh * p.kw + kw) * kKC + t4) * kLdw + wn + g8;
      uint32_t bh[4][2], bl[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float v = wk[e * 4 * kLdw + nt * 8];
          bh[nt][e] = M == Mode::THREE ? to_tf32(v) : __float_as_uint(v);
          if (M == Mode::THREE) bl[nt][e] = to_tf32(v - __uint_as_float(bh[nt][e]));
        }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float af[4];
        if constexpr (LINEAR) {
          af[0] = r0[mt * 16], af[1] = r0[mt * 16 + 8], af[2] = r4[mt * 16], af[3] = r4[mt * 16 + 8];
        } else {
          const char* b0 = reinterpret_cast<const char*>(r0);
          const char* b4 = reinterpret_cast<const char*>(r4);
          af[0] = at(b0, col[mt][0]), af[1] = at(b0, col[mt][1]), af[2] = at(b4, col[mt][0]), af[3] = at(b4, col[mt][1]);
        }
        uint32_t ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ah[e] = hi_bits<M>(af[e]);
          if (M == Mode::THREE) al[e] = to_tf32(af[e] - __uint_as_float(ah[e]));
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          if constexpr (M == Mode::THREE) {  // small products first: hi*lo + lo*hi, then hi*hi
            mma_tf32(acc[mt][nt], ah, bl[nt]);
            mma_tf32(acc[mt][nt], al, bh[nt]);
          }
          mma_tf32(acc[mt][nt], ah, bh[nt]);
        }
      }
    }
  }
}

template <int MT, Mode M>
__device__ __forceinline__ void stage_mma_any(const ConvtParams& p, const float* xs, const float* ws, const int* colt,
                                              const int* rowt, int lin0, int wc, int wn, int g8, int t4,
                                              float (&acc)[4][4][4]) {
  if (p.sw == 1) stage_mma<MT, M, true>(p, xs, ws, colt, rowt, lin0, wc, wn, g8, t4, acc);
  else stage_mma<MT, M, false>(p, xs, ws, colt, rowt, lin0, wc, wn, g8, t4, acc);
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops
