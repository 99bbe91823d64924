// ConvTransposeGroupNormAct on CUDA (issue 13): the transposed convolution as an implicit GEMM on tensor cores
// (mma.sync m16n8k8 TF32, fp32 accumulation) reading NCHW X directly, whose epilogue adds the bias, applies `pre`,
// stores the pre-normalisation value into Y and writes per-(sample, group) partial statistics of its tile; then a
// finishing kernel (Chan's combine per (sample, group)) and an in-place normalise + `post` pass over Y. No tensor of
// Y's size besides Y; the workspace holds the partials, the (mean, rstd) pairs and the packed weights.
//
// The GEMM of one block: M = kTR output rows x kTM output columns of one sample, N = kTN output channels of one
// convolution group, K = that group's input channels x the kernel taps. The gather rule of a transposed convolution,
// out[o] += x[i] * w[k] where i * stride + k * dilation - pad_begin = o, gives for output row oh and tap kh one input
// row or none, and for output column ow and tap kw one input column or none. Per chunk of kKC input channels the
// block stages (cp.async, double-buffered) every input row its output rows reach and the packed weights of every tap,
// then runs all taps out of shared memory; tables built once per block map (row, kh) to a staged row and (kw, column)
// to a staged column, so the main loop does no division. Measurements and what limits it: docs/kernels.md.
//
// Precision: float32 X with allow_tf32 = 1 rounds the operands to TF32 (W when packed, X once per stage);
// allow_tf32 = 0 runs 3xTF32 (each operand split into a TF32 high part and a TF32 low part, three products);
// float16 / bfloat16 operands are exact in TF32, so 16-bit X runs the TF32 path with exact products.
#include "cuda/convt_gn.h"

#include <algorithm>
#include <cstdio>

#include "core/message.h"
#include "cuda/device_common.cuh"
#include "cuda/device_query.h"

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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
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

template <typename T, Mode M>
__global__ void __launch_bounds__(kThreads, 2) convt_kernel(const __grid_constant__ ConvtParams p) {
  extern __shared__ float4 smem_f4[];
  float* smem = reinterpret_cast<float*>(smem_f4);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g8 = lane >> 2, t4 = lane & 3;
  const int wn = (warp & 1) * 32, wc = ((warp >> 1) & 1) * 64, wr = warp >> 2;
  const int64_t pb = blockIdx.x;  // pixel block: row tile and column tile
  const int oh0 = int(pb / p.tiles_w) * kTR, ow0 = int(pb % p.tiles_w) * kTM;
  const int ct = blockIdx.y;  // channel tile, inside one convolution group
  const int tiles_per_group = int(ceil_div(p.cout_g, kTN));
  const int cg = ct / tiles_per_group, co_local0 = (ct % tiles_per_group) * kTN;
  const int co0 = cg * p.cout_g + co_local0;
  const int nco = min(kTN, p.cout_g - co_local0);
  const int n = blockIdx.z;
  // The first input row / column the tile reads (ceil: i * stride >= o + pad - (k - 1) * dilation); rows_in and span
  // count from them.
  const int ih_lo = ceil_div_int(oh0 + p.ph - (p.kh - 1) * p.dh, p.sh);  // input row of stage slot 0
  const int iw_lo = ceil_div_int(ow0 + p.pw - (p.kw - 1) * p.dw, p.sw);
  const int iw_base = p.x_vec4 ? (iw_lo & ~3) : iw_lo;  // input column of stage column 0
  const int zero_col = p.ldx - 1;

  // Zeros in both stages' X: the columns outside X (the stage loads never write them; the linear gather reads them)
  // and the zero column (the column table's target where a tap reads no input).
  for (int s = 0; s < kStages; ++s)
    for (int i = tid; i < kKC * p.plane / 4; i += kThreads)
      reinterpret_cast<float4*>(smem + s * p.stage_floats)[i] = make_float4(0.f, 0.f, 0.f, 0.f);

  // Gather tables, computed once (no division in the main loop): colt[kw][m], the byte offset of the stage column
  // output column ow0 + m reads for tap kw (or of the zero column); rowt[r][kh], the stage slot output row oh0 + r reads for tap kh
  // (or -1: no input row).
  int* colt = reinterpret_cast<int*>(smem + kStages * p.stage_floats);
  int* rowt = colt + p.kw * kTM;
  for (int i = tid; i < p.kw * kTM; i += kThreads)
    colt[i] = int(sizeof(float)) * col_of(p, ow0 + i % kTM, i / kTM, iw_base, zero_col);
  for (int i = tid; i < kTR * p.kh; i += kThreads) {
    const int r = i / p.kh, kh = i % p.kh;
    const int num = oh0 + r + p.ph - kh * p.dh;
    const int ih = num >= 0 && num % p.sh == 0 ? num / p.sh : -1;
    rowt[i] = ih >= 0 && ih < p.hin && oh0 + r < p.hout ? ih - ih_lo : -1;
  }

  // vec4: this thread's 16-byte X copies of a stage, the same for every channel chunk: (k << 16 | stage offset,
  // element offset from the chunk's first channel plane), or -1 where the 4 columns or the row lie outside X.
  int2* xtab = reinterpret_cast<int2*>(smem + kStages * p.stage_floats + align_up(p.kw * kTM + kTR * p.kh, 2));
  if (p.x_vec4) {
    const int g4 = (p.ldx >> 2) - 1;  // the last group holds the zero column
    const int items = kKC * p.rows_in * g4;
    const int iw_a = iw_lo & ~3;
    for (int j = 0; j < p.xi; ++j) {
      const int i = j * kThreads + tid;
      int2 e = make_int2(-1, 0);
      if (i < items) {
        const int q = i % g4, rs = i / g4, slot = rs % p.rows_in, k = rs / p.rows_in;
        const int ih = ih_lo + slot, iw = iw_a + 4 * q;
        if (ih >= 0 && ih < p.hin && iw >= 0 && iw < p.win)
          e = make_int2(k << 16 | (k * p.plane + slot * p.ldx + 4 * q), k * p.hin * p.win + ih * p.win + iw);
      }
      xtab[i] = e;
    }
  }

  // Work of this warp: its output row and its m-tiles (16 columns) that hold outputs.
  const bool row_live = oh0 + wr < p.hout;
  const int mt_live = max(0, min(4, int(ceil_div(p.wout - ow0 - wc, 16))));
  rowt += wr * p.kh;
  // LINEAR: the stage column output column ow0 + wc + g8 reads at tap kw = 0 (subtract kw * dw per tap).
  const int lin0 = ow0 + wc + g8 + p.pw - iw_base;

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

  const int chunks = int(ceil_div(p.cin_g, kKC));
  stage_load<T>(p, smem, smem + kKC * p.plane, xtab, n, cg, 0, ih_lo, iw_lo, co_local0);
  cp_async_commit();
  for (int q = 0; q < chunks; ++q) {
    if (q + 1 < chunks) {
      float* next = smem + ((q + 1) & 1) * p.stage_floats;
      stage_load<T>(p, next, next + kKC * p.plane, xtab, n, cg, (q + 1) * kKC, ih_lo, iw_lo, co_local0);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    if constexpr (M == Mode::TF32) round_stage_tf32(p, smem + (q & 1) * p.stage_floats, xtab, q * kKC, ih_lo, iw_lo);
    __syncthreads();
    const float* xs = smem + (q & 1) * p.stage_floats;
    const float* ws = xs + kKC * p.plane;
    if (row_live && mt_live > 0) {
      switch (mt_live) {  // compile-time m-tile counts: no branch between the MMAs
        case 4: stage_mma_any<4, M>(p, xs, ws, colt, rowt, lin0, wc, wn, g8, t4, acc); break;
        case 3: stage_mma_any<3, M>(p, xs, ws, colt, rowt, lin0, wc, wn, g8, t4, acc); break;
        case 2: stage_mma_any<2, M>(p, xs, ws, colt, rowt, lin0, wc, wn, g8, t4, acc); break;
        default: stage_mma_any<1, M>(p, xs, ws, colt, rowt, lin0, wc, wn, g8, t4, acc); break;
      }
    }
    __syncthreads();  // this stage is read; the next iteration's loads may overwrite it
  }

  // Epilogue: the accumulators into the shared tile [kTN][kTR * kTM + 4]; bias + pre over it four pixels of one
  // channel at a time (one chain decode per four values); then coalesced stores and the tile's statistics.
  constexpr int kPix = kTR * kTM;
  constexpr int ldt = kPix + 4;
  float* tile = smem;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        tile[(wn + nt * 8 + t4 * 2 + (e & 1)) * ldt + wr * kTM + wc + mt * 16 + g8 + (e >> 1) * 8] = acc[mt][nt][e];
  __syncthreads();
  const int ncol = min(kTM, p.wout - ow0);
  const int nrow = min(kTR, p.hout - oh0);
  T* y = static_cast<T*>(p.y);
  const int64_t S = int64_t(p.hout) * p.wout;
  // One (channel, row) of the tile per warp iteration, four columns a lane: bias + pre in place (one chain decode
  // per four values), then the row's stores (vector stores where Y's alignment allows).
  static_assert(kTM == 4 * 32, "a warp covers one tile row with four columns a lane");
  for (int row = warp; row < nco * kTR; row += kThreads / 32) {
    const int cl = row / kTR, r = row % kTR;
    float4* t = reinterpret_cast<float4*>(tile + cl * ldt + r * kTM) + lane;
    const float4 raw = *t;
    const float b = p.bias ? load_param(p.bias, p.param_dtype, co0 + cl) : 0.f;
    float v[4] = {raw.x + b, raw.y + b, raw.z + b, raw.w + b};
    apply_chain<4, false>(&p.pre, v, co0 + cl, &p.ex, p.param_dtype);
    *t = make_float4(v[0], v[1], v[2], v[3]);
    if (r < nrow)
      store4(y + (int64_t(n) * p.cout + co0 + cl) * S + int64_t(oh0 + r) * p.wout + ow0 + 4 * lane, v,
             ncol - 4 * lane);
  }
  __syncthreads();
  // One warp per GroupNorm group touching the tile: exact two-pass moments over the tile's part of the group.
  const int g_first = co0 / p.Cg, g_last = (co0 + nco - 1) / p.Cg;
  for (int g = g_first + warp; g <= g_last; g += kThreads / 32) {
    const int c_lo = max(g * p.Cg, co0) - co0, c_hi = min((g + 1) * p.Cg, co0 + nco) - co0;
    const int count = (c_hi - c_lo) * nrow * ncol;
    float s = 0.f, m2 = 0.f;
    if (ncol == kTM && nrow == kTR) {  // a whole tile: float4 reads of the channel rows
      for (int i = lane; i < (c_hi - c_lo) * (kPix / 4); i += 32) {
        const float4 v = reinterpret_cast<const float4*>(tile + (c_lo + i / (kPix / 4)) * ldt)[i % (kPix / 4)];
        s += (v.x + v.y) + (v.z + v.w);
      }
      s = warp_sum(s);
      const float mean = s / float(count);
      for (int i = lane; i < (c_hi - c_lo) * (kPix / 4); i += 32) {
        const float4 v = reinterpret_cast<const float4*>(tile + (c_lo + i / (kPix / 4)) * ldt)[i % (kPix / 4)];
        const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
        m2 += (a * a + b * b) + (c * c + d * d);
      }
    } else {
      for (int c = c_lo; c < c_hi; ++c)
        for (int r = 0; r < nrow; ++r)
          for (int m = lane; m < ncol; m += 32) s += tile[c * ldt + r * kTM + m];
      s = warp_sum(s);
      const float mean = s / float(count);
      for (int c = c_lo; c < c_hi; ++c)
        for (int r = 0; r < nrow; ++r)
          for (int m = lane; m < ncol; m += 32) {
            const float d = tile[c * ldt + r * kTM + m] - mean;
            m2 += d * d;
          }
    }
    const float mean = s / float(count);
    m2 = warp_sum(m2);
    if (lane == 0) {
      const int64_t pbs = int64_t(p.tiles_h) * p.tiles_w;
      p.partials[((int64_t(n) * p.G + g) * pbs + pb) * p.tiles_c + ct] = Welford{float(count), mean, m2};
    }
  }
}

// (mean, rstd) of one (sample, group) per block from the partials of every pixel block and channel tile it touches.
__global__ void __launch_bounds__(kNormThreads) convt_finish_kernel(const __grid_constant__ ConvtParams p) {
  const int64_t gi = blockIdx.x;  // n * G + g
  const int g = int(gi % p.G);
  const int64_t pbs = int64_t(p.tiles_h) * p.tiles_w;
  const int tiles_per_group = int(ceil_div(p.cout_g, kTN));
  Welford w{0.f, 0.f, 0.f};
  for (int ct = 0; ct < p.tiles_c; ++ct) {
    const int cg = ct / tiles_per_group, lo = cg * p.cout_g + (ct % tiles_per_group) * kTN;
    const int hi = min(lo + kTN, (cg + 1) * p.cout_g);
    if (hi <= g * p.Cg || lo >= (g + 1) * p.Cg) continue;  // uniform
    for (int64_t i = threadIdx.x; i < pbs; i += blockDim.x)
      w = welford_combine(w, p.partials[(gi * pbs + i) * p.tiles_c + ct]);
  }
  w = block_welford(w);
  if (threadIdx.x == 0) p.stats[gi] = make_float2(w.mean, rsqrtf(w.m2 / w.n + p.eps));
}

// Y = post((Y - mean) * rstd * gamma + beta), in place, one (sample, channel) row chunk per block.
template <typename T>
__global__ void __launch_bounds__(kNormThreads) convt_normalize_kernel(const __grid_constant__ ConvtParams p,
                                                                       int64_t chunk) {
  const int64_t row = blockIdx.x;  // n * C + c
  const int c = int(row % p.cout);
  const int64_t n = row / p.cout;
  const float2 st = p.stats[n * p.G + c / p.Cg];
  const float scale = st.y * load_param(p.gamma, p.param_dtype, c);
  const float b = load_param(p.beta, p.param_dtype, c);
  const int64_t S = int64_t(p.hout) * p.wout;
  T* y = static_cast<T*>(p.y) + row * S;
  const int64_t begin = int64_t(blockIdx.y) * chunk, end = min(S, begin + chunk);
  if (reinterpret_cast<uintptr_t>(y) % (4 * sizeof(T)) == 0) {  // chunk % 4 == 0: vector loads and stores
    for (int64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * blockDim.x) {
      float v[4];
      const int valid = end - i < 4 ? int(end - i) : 4;
      load4(y + i, v, valid);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = (v[j] - st.x) * scale + b;
      apply_chain<4, false>(&p.post, v, c, &p.ex, p.param_dtype);
      store4(y + i, v, valid);
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float v[1] = {(to_float(y[i]) - st.x) * scale + b};
    apply_chain<1, false>(&p.post, v, c, &p.ex, p.param_dtype);
    y[i] = from_float<T>(v[0]);
  }
}

template <typename T, Mode M>
void kernels_of(const void** conv, const void** pack) {
  *conv = reinterpret_cast<const void*>(convt_kernel<T, M>);
  *pack = reinterpret_cast<const void*>(pack_weights_kernel<T, M>);
}
template <typename T>
const void* normalize_kernel() {
  return reinterpret_cast<const void*>(convt_normalize_kernel<T>);
}

struct Layout {
  int32_t tiles_h, tiles_w, tiles_c, rows_in, span, ldx, plane, stage_floats, cout_gp, x_vec4, xi;
  int64_t pixel_blocks;
  size_t smem, partials_bytes, stats_offset, wp_offset, total;
};

Layout layout(const fusedops_op_desc& d) {
  const fusedops_conv_desc& cv = d.conv;
  const bool one_d = cv.spatial_rank == 1;
  const int i = one_d ? 0 : 1;  // the column dimension's index in the descriptor's arrays
  const int64_t wout = cv.output[i], hout = one_d ? 1 : cv.output[0];
  const int64_t win = cv.input[i];
  const int sw = cv.strides[i], kw = cv.kernel[i], dw = cv.dilations[i];
  const int sh = one_d ? 1 : cv.strides[0], kh = one_d ? 1 : cv.kernel[0], dh = one_d ? 1 : cv.dilations[0];
  Layout l{};
  l.tiles_h = int32_t(ceil_div(hout, kTR));
  l.tiles_w = int32_t(ceil_div(wout, kTM));
  const int64_t cout_g = d.d.gn.C / cv.group;
  l.tiles_c = int32_t(cv.group * ceil_div(cout_g, kTN));
  l.cout_gp = int32_t(ceil_div(cout_g, kTN) * kTN);
  l.rows_in = int32_t((kTR - 1 + (kh - 1) * dh) / sh + 1);
  l.span = int32_t((kTM - 1 + (kw - 1) * dw) / sw + 1);
  l.x_vec4 = d.d.gn.x_dtype == FUSEDOPS_F32 && win % 4 == 0 ? 1 : 0;  // and X 16-byte aligned: per run
  // vec4: stage column 0 is the input column rounded down to a multiple of 4 (up to 3 more columns), and the zero
  // column sits alone in the last 4-column group; else the zero column follows the span.
  l.ldx = l.x_vec4 ? int32_t(align_up(size_t(l.span) + 3, 4) + 4) : l.span + 1;
  l.plane = int32_t(align_up(size_t(l.rows_in) * l.ldx, 32) + 8);  // = 8 (mod 32): conflict-free A fragments
  l.stage_floats = kKC * l.plane + kh * kw * kKC * kLdw;
  // vec4 needs each stage offset < 2^16 floats and a channel chunk's element offsets in int32
  if (l.x_vec4 && (size_t(kKC) * l.plane > 0xffff || int64_t(kKC) * (one_d ? 1 : cv.input[0]) * win >= INT32_MAX)) l.x_vec4 = 0;
  l.xi = l.x_vec4 ? int32_t(ceil_div(int64_t(kKC) * l.rows_in * (l.ldx / 4 - 1), kThreads)) : 0;
  const size_t main = size_t(kStages) * l.stage_floats * sizeof(float) +
                      align_up(size_t(kw * kTM + kTR * kh), 2) * sizeof(int) + size_t(l.xi) * kThreads * sizeof(int2);
  const size_t tile = size_t(kTN) * (kTR * kTM + 4) * sizeof(float);
  l.smem = std::max(main, tile);
  l.pixel_blocks = int64_t(l.tiles_h) * l.tiles_w;
  const int64_t groups = d.d.gn.N * d.d.gn.num_groups;
  l.partials_bytes = size_t(groups) * size_t(l.pixel_blocks) * size_t(l.tiles_c) * sizeof(Welford);
  l.stats_offset = align_up(l.partials_bytes, kAlignWs);
  l.wp_offset = align_up(l.stats_offset + size_t(groups) * sizeof(float2), kAlignWs);
  const size_t wp_bytes = size_t(cv.group) * kh * kw * size_t(cv.in_channels / cv.group) * l.cout_gp * sizeof(float);
  l.total = kAlignWs + l.wp_offset + wp_bytes;
  return l;
}

}  // namespace

struct ConvtLaunch {
  ConvtParams base{};
  const void* conv = nullptr;
  const void* pack = nullptr;
  const void* normalize = nullptr;
  size_t smem = 0;
  dim3 pack_grid, conv_grid, finish_grid, norm_grid;
  int64_t norm_chunk = 0;
  Layout l{};
};
void ConvtLaunchDeleter::operator()(ConvtLaunch* p) const { delete p; }

size_t convt_workspace_size(const fusedops_op_desc& d) { return layout(d).total; }

int convt_plan(const fusedops_op_desc& d, const fusedops_plan_options& o, ConvtLaunchPtr* out, size_t* workspace,
               std::string* kernels, char* err, size_t err_len) {
  (void)o;
  const char* op = "ConvTransposeGroupNormAct";
  const fusedops_groupnorm_desc& gn = d.d.gn;
  const fusedops_conv_desc& cv = d.conv;
  using core::set_message;
  if (gn.reduce != FUSEDOPS_REDUCE_NONE)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: the CUDA kernel has no channel reduction yet (reduce code %d of %s)", op,
                       int(gn.reduce), FUSEDOPS_REDUCE_NAMES_TEXT);
  if (cv.channels_last)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: the CUDA kernel takes NCHW tensors only (channels_last = 1 given)", op);
  const DeviceInfo dev = device_info();
  if (dev.cc_major < 8)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: the CUDA kernel needs compute capability 8.0 or newer (TF32 tensor cores)", op);
  const bool one_d = cv.spatial_rank == 1;
  ConvtLaunchPtr p(new ConvtLaunch());
  const Layout l = layout(d);
  ConvtParams& b = p->base;
  b.param_dtype = gn.param_dtype;
  b.pre = gn.pre;
  b.post = gn.post;
  b.cin = int32_t(cv.in_channels);
  b.cout = int32_t(gn.C);
  b.groups = cv.group;
  b.cin_g = b.cin / cv.group;
  b.cout_g = b.cout / cv.group;
  b.hin = one_d ? 1 : int32_t(cv.input[0]);
  b.win = int32_t(one_d ? cv.input[0] : cv.input[1]);
  b.hout = one_d ? 1 : int32_t(cv.output[0]);
  b.wout = int32_t(one_d ? cv.output[0] : cv.output[1]);
  const int i = one_d ? 0 : 1;  // the column dimension's index in the descriptor's arrays
  b.kh = one_d ? 1 : cv.kernel[0];
  b.kw = cv.kernel[i];
  b.sh = one_d ? 1 : cv.strides[0];
  b.sw = cv.strides[i];
  b.ph = one_d ? 0 : cv.pads_begin[0];
  b.pw = cv.pads_begin[i];
  b.dh = one_d ? 1 : cv.dilations[0];
  b.dw = cv.dilations[i];
  b.G = gn.num_groups;
  b.Cg = int32_t(gn.C / gn.num_groups);
  b.cout_gp = l.cout_gp;
  b.tiles_h = l.tiles_h;
  b.tiles_w = l.tiles_w;
  b.tiles_c = l.tiles_c;
  b.rows_in = l.rows_in;
  b.span = l.span;
  b.ldx = l.ldx;
  b.plane = l.plane;
  b.x_vec4 = l.x_vec4;
  b.stage_floats = l.stage_floats;
  b.xi = l.xi;
  b.eps = gn.epsilon;
  if (gn.N > 65535 || l.tiles_c > 65535 || l.pixel_blocks > INT32_MAX)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: batch %lld, %d channel tiles or %lld pixel blocks exceed the kernel's grid", op,
                       (long long)gn.N, l.tiles_c, (long long)l.pixel_blocks);
  const bool three = gn.x_dtype == FUSEDOPS_F32 && !d.d.allow_tf32;
  switch (gn.x_dtype) {
    case FUSEDOPS_F16:
      kernels_of<__half, Mode::EXACT>(&p->conv, &p->pack), p->normalize = normalize_kernel<__half>();
      break;
    case FUSEDOPS_BF16:
      kernels_of<__nv_bfloat16, Mode::EXACT>(&p->conv, &p->pack), p->normalize = normalize_kernel<__nv_bfloat16>();
      break;
    default:
      if (three) kernels_of<float, Mode::THREE>(&p->conv, &p->pack);
      else kernels_of<float, Mode::TF32>(&p->conv, &p->pack);
      p->normalize = normalize_kernel<float>();
      break;
  }
  p->smem = l.smem;
  if (!allow_smem(p->conv, p->smem))
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: %zu bytes of shared memory per block (kernel %dx%d, dilations %dx%d, strides %dx%d) "
                       "exceed this device's limit", op, p->smem, b.kh, b.kw, b.dh, b.dw, b.sh, b.sw);
  const int64_t wp_elems = int64_t(cv.group) * b.kh * b.kw * b.cin_g * l.cout_gp;
  p->pack_grid = dim3(unsigned(std::min<int64_t>(1024, ceil_div(wp_elems, kNormThreads))));
  p->conv_grid = dim3(unsigned(l.pixel_blocks), unsigned(l.tiles_c), unsigned(gn.N));
  p->finish_grid = dim3(unsigned(gn.N * gn.num_groups));
  const int64_t S = int64_t(b.hout) * b.wout;
  const int64_t chunks = std::min<int64_t>(65535, ceil_div(S, int64_t(kNormThreads) * 16));
  p->norm_chunk = int64_t(align_up(size_t(ceil_div(S, chunks)), 4));  // whole vectors per block
  p->norm_grid = dim3(unsigned(gn.N * gn.C), unsigned(ceil_div(S, p->norm_chunk)));
  p->l = l;
  *workspace = l.total;
  char text[256];
  std::snprintf(text, sizeof text,
                "convt_pack_w + convt_igemm(%s,%dx%dx%d,kc=%d,smem=%zu%s) + gn_stats_finish + gn_normalize_inplace",
                three ? "3xtf32" : gn.x_dtype == FUSEDOPS_F32 ? "tf32" : gn.x_dtype == FUSEDOPS_F16 ? "f16>tf32"
                                                                                                    : "bf16>tf32",
                kTR, kTM, kTN, kKC, p->smem, l.x_vec4 ? ",vec4" : "");
  *kernels = text;
  *out = std::move(p);
  return FUSEDOPS_OK;
}

cudaError_t convt_run(const ConvtLaunch& lp, const void* const* in, int32_t num_inputs, void* y, void* workspace,
                      cudaStream_t stream) {
  ConvtParams p = lp.base;
  p.x = in[0];
  p.x_vec4 = p.x_vec4 && reinterpret_cast<uintptr_t>(in[0]) % 16 == 0;
  p.w = in[1];
  p.bias = in[2];
  p.gamma = in[3];
  p.beta = in[4];
  for (int k = 0; k < FUSEDOPS_MAX_EXTRAS; ++k) p.ex.p[k] = 5 + k < num_inputs ? in[5 + k] : nullptr;
  p.y = y;
  char* ws = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(workspace), kAlignWs));
  p.partials = reinterpret_cast<Welford*>(ws);
  p.stats = reinterpret_cast<float2*>(ws + lp.l.stats_offset);
  p.wp = reinterpret_cast<const float*>(ws + lp.l.wp_offset);
  void* args[2] = {&p, nullptr};
  cudaError_t e = cudaLaunchKernel(lp.pack, lp.pack_grid, dim3(kNormThreads), args, 0, stream);
  if (e != cudaSuccess) return e;
  e = cudaLaunchKernel(lp.conv, lp.conv_grid, dim3(kThreads), args, lp.smem, stream);
  if (e != cudaSuccess) return e;
  e = cudaLaunchKernel(reinterpret_cast<const void*>(convt_finish_kernel), lp.finish_grid, dim3(kNormThreads), args,
                       0, stream);
  if (e != cudaSuccess) return e;
  int64_t chunk = lp.norm_chunk;
  args[1] = &chunk;
  return cudaLaunchKernel(lp.normalize, lp.norm_grid, dim3(kNormThreads), args, 0, stream);
}

}  // namespace cuda
}  // namespace fusedops
