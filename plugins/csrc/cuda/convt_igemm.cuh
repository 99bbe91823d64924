// Internal to convt_gn.cu: the mma.sync convolution kernel of ConvTransposeGroupNormAct (every device from sm_80 and
// every shape the wgmma kernel does not take).
//
// The transposed convolution as an implicit GEMM on tensor cores (mma.sync m16n8k8 TF32, fp32 accumulation) reading
// NCHW X directly, whose epilogue adds the bias, applies `pre`, stores the pre-normalisation value into Y and writes
// per-(sample, group) partial statistics of its tile (the finishing and normalise kernels: convt_gn_finish.cuh).
//
// The GEMM of one block: M = kTR output rows x kTM output columns of one sample, N = kTN output channels of one
// convolution group, K = that group's input channels x the kernel taps. The gather rule of a transposed convolution,
// out[o] += x[i] * w[k] where i * stride + k * dilation - pad_begin = o, gives for output row oh and tap kh one input
// row or none, and for output column ow and tap kw one input column or none. Per chunk of kKC input channels the
// block stages (cp.async, double-buffered) every input row its output rows reach and the packed weights of every tap,
// then runs all taps out of shared memory; tables built once per block map (row, kh) to a staged row and (kw, column)
// to a staged column, so the main loop does no division (the pieces: convt_gn_blocks.cuh). Measurements and what
// limits it: docs/convt.md.
//
// Precision: float32 X with allow_tf32 = 1 rounds the operands to TF32 (W when packed, X once per stage);
// allow_tf32 = 0 runs 3xTF32 (each operand split into a TF32 high part and a TF32 low part, three products);
// float16 / bfloat16 operands are exact in TF32, so 16-bit X runs the TF32 path with exact products.
#pragma once

#include "cuda/convt_gn_blocks.cuh"

namespace fusedops {
namespace cuda {
namespace {

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
  // Every thread's zeros are in before any thread's copies land: compute-sanitizer's racecheck found the first
  // stage's cp.async writes racing the zero fill of the same slots (H200, 2026-11-27), which could leave a zero
  // where X's value had landed.
  __syncthreads();
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

template <typename T, Mode M>
void kernels_of(const void** conv, const void** pack) {
  *conv = reinterpret_cast<const void*>(convt_kernel<T, M>);
  *pack = reinterpret_cast<const void*>(pack_weights_kernel<T, M>);
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops
