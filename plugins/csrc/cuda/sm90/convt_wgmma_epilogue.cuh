// Internal to convt_wgmma.cu: the wgmma convolution's epilogues (in registers for `pre` = nothing or GELU alone,
// through shared memory for any other chain).
#pragma once

#include <type_traits>

#include "cuda/sm90/convt_wgmma.h"
#include "cuda/sm90/wgmma_ptx.cuh"

namespace fusedops {
namespace cuda {
namespace sm90 {

constexpr int kLdTile = 256 + 8;  // shared epilogue tile row stride (floats): = 8 (mod 32), conflict-free float2 stores

// Two consecutive elements of Y from float32 at y + i (i < 2^32 elements), stored where `out` holds: a predicated
// store, no branch region (a branch a fragment column kept ptxas from interleaving the columns' arithmetic), and one
// wide multiply-add for the address.
__device__ __forceinline__ void store_pair_if(bool out, float* y, uint32_t i, float a, float b) {
  asm volatile(
      "{\n .reg .pred p;\n .reg .b64 a;\n setp.ne.b32 p, %0, 0;\n mad.wide.u32 a, %2, 4, %1;\n"
      " @p st.global.v2.f32 [a], {%3, %4};\n}" ::"r"(int(out)),
      "l"(y), "r"(i), "f"(a), "f"(b)
      : "memory");
}
__device__ __forceinline__ void store_word_if(bool out, const void* y, uint32_t i, uint32_t v) {
  asm volatile(
      "{\n .reg .pred p;\n .reg .b64 a;\n setp.ne.b32 p, %0, 0;\n mad.wide.u32 a, %2, 2, %1;\n"
      " @p st.global.b32 [a], %3;\n}" ::"r"(int(out)),
      "l"(y), "r"(i), "r"(v)
      : "memory");
}
__device__ __forceinline__ void store_pair_if(bool out, __nv_bfloat16* y, uint32_t i, float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  store_word_if(out, y, i, *reinterpret_cast<const uint32_t*>(&v));
}
__device__ __forceinline__ void store_pair_if(bool out, __half* y, uint32_t i, float a, float b) {
  const __half2 v = __floats2half2_rn(a, b);
  store_word_if(out, y, i, *reinterpret_cast<const uint32_t*>(&v));
}

// With a normaliser kernel behind this one (p.done non-null): each thread that writes a partial counts it in done[n]
// after a fence. The warpgroup's Y stores come before the barrier that precedes the partials, so the normaliser,
// which reads after seeing the count, sees them too. A barrier of its own at the epilogue's end spilled the 16-bit
// kernels' consumers (128 bytes).
__device__ __forceinline__ void publish_partial(const ConvtSm90Params& p, int n) {
  if (p.done == nullptr) return;
  __threadfence();
  atomicAdd(p.done + n, 1u);
}

// The epilogue on the accumulators, for `pre` = nothing (kPre 0) or GELU alone (kPre 1: gelu_fast as the GroupNormAct
// kernels run it for float32 Y, gelu_fast16 for 16-bit Y): bias + pre in registers, Y stored straight from the
// fragments (a lane quad writes 8 consecutive pixels of a channel row), then exact two-pass statistics of each
// GroupNorm group over the warpgroup's pixels: the sum of every 8-row block by warp shuffles, the blocks of a group
// combined through shared memory (groups of 32 or 64+ channels span warps), then the squared deviations from the
// group mean the same way. No shared memory of the tile's size: the stages stay untouched. N accumulators a thread:
// the warpgroup's 2 N pixels (256, or 128 at 3xTF32).
//
// Branch-free per fragment column (the ncu SASS profile of 2026-11-27 put this epilogue at 39 instructions a value,
// a third of them the row-wrap loop, 64-bit store addresses and per-value validity tests, with a branch region per
// column that kept ptxas from interleaving the columns' GELUs): the pixel pair's position steps by 8 with at most one
// row wrap (wpad >= 8, convt_gn.cu), its Y offset is 32-bit (a plane fits int32), stores and sums are predicated,
// and validity is one bit a column.
template <typename T, int kPre, int N>
__device__ __forceinline__ void epilogue_registers(const ConvtSm90Params& p, float (&acc)[N], float* xch, int wg,
                                                   int wl, int lane, int m0, int n, int ct, int tile) {
  static_assert(N / 4 <= 32, "one validity bit a fragment column");
  named_sync(2 + wg, 128);  // a persistent block's previous tile read `xch` last: its warps are past that
  const int co0 = ct * kSm90Cout, rbase = wl * 16 + (lane >> 2);
  const float b0 = p.bias ? load_param(p.bias, p.param_dtype, co0 + rbase) : 0.f;
  const float b1 = p.bias ? load_param(p.bias, p.param_dtype, co0 + rbase + 8) : 0.f;
  const int HW = p.hout * p.wout;  // (plan: a plane fits int32)
  T* y0 = static_cast<T*>(p.y) + (int64_t(n) * p.cout + co0 + rbase) * HW;
  T* y1 = y0 + 8 * int64_t(HW);
  const int pix = m0 + wg * 2 * N + 2 * (lane & 3);  // this lane's first pixel column (j = 0, e = 0)
  int oy = pix / p.wpad, ox = pix - oy * p.wpad;
  int off = oy * p.wout + ox;  // the pair's offset in a Y plane where it is an output
  const int wrap = p.wpad - p.wout;
  uint32_t valid = 0;  // bit j: pixels pix + 8 j and pix + 8 j + 1 are outputs
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float& v0 = acc[4 * j + e];
      float& v1 = acc[4 * j + 2 + e];
      v0 += b0, v1 += b1;
      if (kPre == 1) {
        if constexpr (std::is_same_v<T, float>) v0 = gelu_fast(v0), v1 = gelu_fast(v1);
        else v0 = gelu_fast16(v0), v1 = gelu_fast16(v1);  // Y is stored as 16-bit: the degree-6 polynomial
      }
    }
    // wpad and wout are even here (convt_gn.cu sends other shapes to the shared-memory epilogue): a lane's two
    // columns are one row's even and odd pixels, both outputs or neither, at an even offset.
    const bool out = ox < p.wout && oy < p.hout;
    store_pair_if(out, y0, uint32_t(off), acc[4 * j], acc[4 * j + 1]);
    store_pair_if(out, y1, uint32_t(off), acc[4 * j + 2], acc[4 * j + 3]);
    if (out) {
      s0 += acc[4 * j] + acc[4 * j + 1];
      s1 += acc[4 * j + 2] + acc[4 * j + 3];
      valid |= 1u << j;
    }
    ox += 8, off += 8;
    if (ox >= p.wpad) ox -= p.wpad, off -= wrap, ++oy;
  }
  // The warpgroup's valid pixels: every lane quad position counts its own columns once (lanes 0-3).
  float cnt = float(2 * __popc(valid));
  cnt += __shfl_xor_sync(0xffffffffu, cnt, 1);
  cnt += __shfl_xor_sync(0xffffffffu, cnt, 2);
  const float nvalid = __shfl_sync(0xffffffffu, cnt, 0);
  const int rows_g = min(p.Cg, kSm90Cout), blocks_g = rows_g / 8;
  float* xs = xch + wg * 16;  // [8 blocks][sum, m2]; block b = 2 wl + i holds rows 8 b .. 8 b + 7
  s0 = warp_sum(s0), s1 = warp_sum(s1);
  if (lane == 0) xs[2 * (2 * wl)] = s0, xs[2 * (2 * wl + 1)] = s1;
  named_sync(2 + wg, 128);
  const float inv = nvalid > 0.f ? __fdividef(1.f, nvalid * float(rows_g)) : 0.f;
  float mean[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int g0 = (2 * wl + i) / blocks_g * blocks_g;
    float t = 0.f;
    for (int b = 0; b < blocks_g; ++b) t += xs[2 * (g0 + b)];
    mean[i] = t * inv;
  }
  float m0s = 0.f, m1s = 0.f;
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    const bool out = valid >> j & 1u;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float d0 = acc[4 * j + e] - mean[0], d1 = acc[4 * j + 2 + e] - mean[1];
      m0s = out ? fmaf(d0, d0, m0s) : m0s;
      m1s = out ? fmaf(d1, d1, m1s) : m1s;
    }
  }
  m0s = warp_sum(m0s), m1s = warp_sum(m1s);
  if (lane == 0) xs[2 * (2 * wl) + 1] = m0s, xs[2 * (2 * wl + 1) + 1] = m1s;
  named_sync(2 + wg, 128);
  const int t = wl * 32 + lane;
  if (t < kSm90Cout / rows_g) {
    float sum = 0.f, m2 = 0.f;
    for (int b = 0; b < blocks_g; ++b) sum += xs[2 * (t * blocks_g + b)], m2 += xs[2 * (t * blocks_g + b) + 1];
    const int g = (co0 + t * rows_g) / p.Cg;
    const int64_t pbs = 2 * int64_t(p.tiles), pb = 2 * int64_t(tile) + wg;
    p.partials[((int64_t(n) * p.G + g) * pbs + pb) * p.tiles_c + ct] = Welford{nvalid * float(rows_g), sum * inv, m2};
    publish_partial(p, n);
  }
}


// The epilogue for any other `pre` chain: the accumulators through a shared-memory tile [64 channels][2 N pixels] a
// warpgroup (over the stages, free once both warpgroups' MMAs are done), one channel row per warp at a time: bias +
// the chain interpreter, Y stored coalesced, then exact two-pass statistics per group.
template <typename T, int N>
__device__ __forceinline__ void epilogue_shared(const ConvtSm90Params& p, float (&acc)[N], unsigned char* stages,
                                                int wg, int wl, int lane, int m0, int n, int ct, int tile) {
  constexpr int kLanePix = 2 * N / 32;  // pixels a lane in pass 1 and 2
  named_sync(1, 256);  // both consumer warpgroups are done with the stages: the epilogue tiles overwrite them

  // Accumulators -> tile [64 channels][2 N pixels] of this warpgroup.
  float* tilef = reinterpret_cast<float*>(stages) + size_t(wg) * kSm90Cout * kLdTile;
#pragma unroll
  for (int j = 0; j < N / 4; ++j)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = wl * 16 + (lane >> 2) + 8 * i, col = 8 * j + 2 * (lane & 3);
      *reinterpret_cast<float2*>(tilef + row * kLdTile + col) = make_float2(acc[4 * j + 2 * i], acc[4 * j + 2 * i + 1]);
    }
  float* rowsum = reinterpret_cast<float*>(stages) + size_t(2) * kSm90Cout * kLdTile + wg * 2 * kSm90Cout;
  float* rowm2 = rowsum + kSm90Cout;
  // This lane's pixels lane + 32 k of the warpgroup's 2 N: their offsets in a Y plane, and which are outputs (the
  // padded grid's columns past wout and rows past hout are not).
  int yoff[kLanePix];
  uint32_t valid = 0;
  const int pix0 = m0 + wg * 2 * N;
#pragma unroll
  for (int k = 0; k < kLanePix; ++k) {
    const int m = pix0 + lane + 32 * k, oy = m / p.wpad, ox = m - oy * p.wpad;
    yoff[k] = oy * p.wout + ox;
    if (ox < p.wout && oy < p.hout) valid |= 1u << k;
  }
  const int nvalid = int(warp_sum(float(__popc(valid))));
  named_sync(2 + wg, 128);

  const int64_t HW = int64_t(p.hout) * p.wout;
  const int co0 = ct * kSm90Cout;
  // Pass 1, one channel row per warp: bias + pre, store Y, keep the value for pass 2, the row's sum.
  for (int r = wl; r < kSm90Cout; r += 4) {
    const int c = co0 + r;
    const float b = p.bias ? load_param(p.bias, p.param_dtype, c) : 0.f;
    float v[kLanePix];
#pragma unroll
    for (int k = 0; k < kLanePix; ++k) v[k] = tilef[r * kLdTile + lane + 32 * k] + b;
    apply_chain_inline<kLanePix, false>(p.pre, v, c, p.ex, p.param_dtype);
    T* yrow = static_cast<T*>(p.y) + (int64_t(n) * p.cout + c) * HW;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kLanePix; ++k) {
      tilef[r * kLdTile + lane + 32 * k] = v[k];
      if (valid >> k & 1) {
        s += v[k];
        yrow[yoff[k]] = from_float<T>(v[k]);
      }
    }
    s = warp_sum(s);
    if (lane == 0) rowsum[r] = s;
  }
  named_sync(2 + wg, 128);
  // Pass 2: squared deviations from the group's mean over this tile (exact two-pass, no E[x^2] - E[x]^2).
  const int rows_g = min(p.Cg, kSm90Cout);  // a group's rows inside the tile (Cg divides 64 or 64 divides Cg)
  const float inv_count = nvalid > 0 ? __fdividef(1.f, float(nvalid) * float(rows_g)) : 0.f;
  for (int r = wl; r < kSm90Cout; r += 4) {
    const int g0 = r / rows_g * rows_g;
    float s = 0.f;
    for (int k = 0; k < rows_g; ++k) s += rowsum[g0 + k];
    const float mean = s * inv_count;
    float m2 = 0.f;
#pragma unroll
    for (int k = 0; k < kLanePix; ++k)
      if (valid >> k & 1) {
        const float d = tilef[r * kLdTile + lane + 32 * k] - mean;
        m2 += d * d;
      }
    m2 = warp_sum(m2);
    if (lane == 0) rowm2[r] = m2;
  }
  named_sync(2 + wg, 128);
  const int t = wl * 32 + lane;
  if (t < kSm90Cout / rows_g) {
    float s = 0.f, m2 = 0.f;
    for (int k = 0; k < rows_g; ++k) s += rowsum[t * rows_g + k], m2 += rowm2[t * rows_g + k];
    const int g = (co0 + t * rows_g) / p.Cg;
    const int64_t pbs = 2 * int64_t(p.tiles), pb = 2 * int64_t(tile) + wg;
    p.partials[((int64_t(n) * p.G + g) * pbs + pb) * p.tiles_c + ct] =
        Welford{float(nvalid) * float(rows_g), s * inv_count, m2};
    publish_partial(p, n);
  }
}

}  // namespace sm90
}  // namespace cuda
}  // namespace fusedops
