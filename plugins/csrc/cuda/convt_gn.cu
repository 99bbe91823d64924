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
// to a staged column, so the main loop does no division (the pieces: convt_gn_blocks.cuh). Measurements and what
// limits it: docs/convt.md.
//
// Precision: float32 X with allow_tf32 = 1 rounds the operands to TF32 (W when packed, X once per stage);
// allow_tf32 = 0 runs 3xTF32 (each operand split into a TF32 high part and a TF32 low part, three products);
// float16 / bfloat16 operands are exact in TF32, so 16-bit X runs the TF32 path with exact products.
#include "cuda/convt_gn.h"

#include <algorithm>
#include <cstdio>

#include "core/message.h"
#include "cuda/convt_gn_blocks.cuh"
#include "cuda/convt_gn_finish.cuh"
#include "cuda/convt_normaliser.cuh"
#include "cuda/device_common.cuh"
#include "cuda/device_query.h"
#include "cuda/sm90/convt_wgmma.h"

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
  bool sm90 = false;  // the wgmma kernel (sm90/convt_wgmma.cu) instead of convt_kernel
  ConvtSm90Params s9{};
  ConvtSm90Layout s9l{};
  int32_t norm_blocks = 0;   // > 0: the normaliser kernel runs behind the wgmma convolution on this many blocks
  uint32_t norm_target = 0;  // the partials of a sample it waits for
  const void* normaliser = nullptr;
};
void ConvtLaunchDeleter::operator()(ConvtLaunch* p) const { delete p; }

// Either kernel's workspace, whichever the device picks.
size_t convt_workspace_size(const fusedops_op_desc& d) {
  const ConvtSm90Layout s9 = convt_sm90_layout(d);
  return std::max(layout(d).total, s9.eligible ? s9.total : size_t(0));
}

namespace {
// The sm_90a wgmma path for a plan, when the device, the build and the descriptor allow it (and the options do not
// force the mma.sync kernel): its parameters, shared memory and grids. False leaves the plan on convt_kernel; `why`
// says why (for a forced choice).
bool plan_sm90(const fusedops_op_desc& d, const ConvtParams& b, const fusedops_plan_options& o, ConvtLaunch* p,
               const char** why) {
  const ConvtSm90Layout s9 = convt_sm90_layout(d);
  if (!convt_sm90_built()) return *why = "this library was built without sm_90a kernels", false;
  if (device_info().cc_major != 9) return *why = "the device is not sm_90", false;
  if (!s9.eligible) return *why = s9.why, false;
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return cudaGetLastError(), *why = "the device's shared-memory limit is unknown", false;
  int32_t stages = 0, ring = 0;
  const size_t smem = convt_sm90_smem(s9.span, b.kh * b.kw, s9.three, o.convt_ring_producer ? s9.ring_chunk : 0,
                                      size_t(optin), &stages, &ring);
  if (smem == 0) return *why = "its stages exceed the device's shared memory", false;
  // The cap goes to the device's limit, not this plan's size: plans of other shapes (or options) share the kernels,
  // and a later plan with less shared memory must not make this one's launch invalid.
  if (convt_sm90_prepare(size_t(optin)) != cudaSuccess)
    return cudaGetLastError(), *why = "the device refused the kernel's shared memory", false;
  ConvtSm90Params& q = p->s9;
  q.param_dtype = b.param_dtype;
  q.pre = b.pre;
  q.batch = int32_t(d.d.gn.N);
  q.cin = b.cin, q.cout = b.cout, q.hin = b.hin, q.win = b.win, q.hout = b.hout, q.wout = b.wout;
  q.kh = b.kh, q.kw = b.kw, q.dh = b.dh, q.dw = b.dw;
  q.wpad = s9.wpad, q.offy = s9.offy, q.offx = s9.offx, q.span = s9.span;
  q.x_dtype = d.d.gn.x_dtype;
  q.chunks = b.cin / (q.x_dtype == FUSEDOPS_F32 ? kSm90Chunk : 2 * kSm90Chunk), q.stages = stages, q.tiles = s9.tiles;
  q.G = b.G, q.Cg = b.Cg, q.tiles_c = s9.tiles_c;
  q.pre_kind = convt_sm90_pre_kind(b.pre);
  // The normaliser kernel behind the convolution (convt_normaliser.cuh) where asked, on at most half the SMs (and
  // groups whose statistics fit its shared memory); the convolution takes the others, one block an SM, at most one
  // a tile (convt_blocks caps them).
  const int sms = device_info().sms;
  p->norm_blocks = b.G <= kNormaliserMaxGroups ? std::min(o.convt_normalisers > 0 ? o.convt_normalisers : 0, sms / 2)
                                                : 0;
  if (p->norm_blocks > 0 && cudaFuncSetAttribute(p->normaliser, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 int(normaliser_smem(b.G))) != cudaSuccess)
    return cudaGetLastError(), *why = "the device refused the normaliser kernel's shared memory", false;
  q.blocks = int32_t(std::min<int64_t>(int64_t(s9.tiles) * s9.tiles_c * q.batch,
                                       o.convt_blocks > 0 ? o.convt_blocks : sms - p->norm_blocks));
  // Partials a sample: one a (warpgroup tile, group in its channel tile), each counted once written.
  p->norm_target = uint32_t(2 * s9.tiles * s9.tiles_c * (kSm90Cout / std::min(b.Cg, kSm90Cout)));
  q.three = s9.three;
  q.ring = ring;
  p->smem = smem;
  p->s9l = s9;
  p->sm90 = true;
  // The finishing kernel reads the partials as [N][G][pixel blocks][channel tiles]: one pixel block per consumer
  // warpgroup, channel tiles of 64 (= kTN).
  p->base.tiles_h = 1, p->base.tiles_w = 2 * s9.tiles, p->base.tiles_c = s9.tiles_c;
  return true;
}
}  // namespace

int convt_plan(const fusedops_op_desc& d, const fusedops_plan_options& o, ConvtLaunchPtr* out, size_t* workspace,
               std::string* kernels, char* err, size_t err_len) {
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
      p->normaliser = normaliser_kernel<__half>();
      break;
    case FUSEDOPS_BF16:
      kernels_of<__nv_bfloat16, Mode::EXACT>(&p->conv, &p->pack), p->normalize = normalize_kernel<__nv_bfloat16>();
      p->normaliser = normaliser_kernel<__nv_bfloat16>();
      break;
    default:
      if (three) kernels_of<float, Mode::THREE>(&p->conv, &p->pack);
      else kernels_of<float, Mode::TF32>(&p->conv, &p->pack);
      p->normalize = normalize_kernel<float>(), p->normaliser = normaliser_kernel<float>();
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
  // The normalise pass: a plane's 16-byte vectors in chunks of whole rounds (kNormVecs a thread).
  const int64_t esize = gn.x_dtype == FUSEDOPS_F32 ? 4 : 2, round = kNormVecs * kNormThreads;
  const int64_t plane_vecs = ceil_div(S * esize, int64_t(16));
  const int64_t planes = gn.N * gn.C, max_chunks = std::max<int64_t>(1, INT32_MAX / std::max<int64_t>(1, planes));
  const int64_t chunks = std::clamp<int64_t>(ceil_div(plane_vecs, round), 1, max_chunks);
  p->norm_chunk = std::max<int64_t>(1, ceil_div(ceil_div(plane_vecs, chunks), round)) * round;  // vectors a block
  if (planes * ceil_div(plane_vecs, p->norm_chunk) > INT32_MAX)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: %lld output planes exceed the normalise pass's grid", op, (long long)planes);
  p->norm_grid = dim3(unsigned(planes * ceil_div(plane_vecs, p->norm_chunk)));  // 1-D: (plane, chunk), chunk fastest
  p->l = l;
  *workspace = convt_workspace_size(d);
  const char* why = "";
  if (o.convt_kernel != FUSEDOPS_CONVT_IGEMM && !plan_sm90(d, b, o, p.get(), &why) &&
      o.convt_kernel == FUSEDOPS_CONVT_WGMMA)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED, "%s: the sm_90 wgmma kernel cannot run this: %s", op,
                       why);
  char text[256], behind[64] = " + gn_stats_finish + gn_normalize_inplace";
  if (p->norm_blocks > 0) std::snprintf(behind, sizeof behind, " + convt_normaliser(blocks=%d,behind)", p->norm_blocks);
  if (p->sm90)
    std::snprintf(text, sizeof text, "convt_pack_w + convt_wgmma(%s,64x%d,stages=%d,ring=%d,smem=%zu,blocks=%d)%s",
                  p->s9.three                     ? "3xtf32"
                  : gn.x_dtype == FUSEDOPS_F32    ? "tf32"
                  : gn.x_dtype == FUSEDOPS_BF16   ? "bf16"
                                                  : "f16",
                  convt_sm90_tile_pixels(p->s9.three != 0), p->s9.stages, p->s9.ring, p->smem, p->s9.blocks,
                  behind);
  else
    std::snprintf(text, sizeof text,
                  "convt_pack_w + convt_igemm(%s,%dx%dx%d,kc=%d,smem=%zu%s) + gn_stats_finish + gn_normalize_inplace",
                  three ? "3xtf32" : gn.x_dtype == FUSEDOPS_F32 ? "tf32" : gn.x_dtype == FUSEDOPS_F16 ? "f16>tf32"
                                                                                                      : "bf16>tf32",
                  kTR, kTM, kTN, kKC, p->smem, l.x_vec4 ? ",vec4" : "");
  *kernels = text;
  *out = std::move(p);
  return FUSEDOPS_OK;
}

namespace {
// The normaliser kernel right behind the wgmma convolution in the stream, allowed to start before it ends (the
// convolution triggers its dependents at its start); without that permission it would run after it, still correct.
cudaError_t launch_normaliser(const ConvtLaunch& lp, ConvtParams& p, uint32_t* done, int32_t batch,
                              cudaStream_t stream) {
  const uint32_t* done_c = done;
  uint32_t target = lp.norm_target;
  void* args[] = {&p, &done_c, &target, &batch};
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(lp.norm_blocks));
  cfg.blockDim = dim3(unsigned(kNormaliserThreads));
  cfg.dynamicSmemBytes = normaliser_smem(p.G);
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelExC(&cfg, lp.normaliser, args);
}
}  // namespace

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
  p.stats = reinterpret_cast<float2*>(ws + (lp.sm90 ? lp.s9l.stats_offset : lp.l.stats_offset));
  p.wp = reinterpret_cast<const float*>(ws + (lp.sm90 ? lp.s9l.wp_offset : lp.l.wp_offset));
  void* args[2] = {&p, nullptr};
  cudaError_t e;
  if (lp.sm90) {
    ConvtSm90Params q = lp.s9;
    const int per16 = q.x_dtype == FUSEDOPS_F32 ? 4 : 8;  // elements in 16 bytes
    q.x = p.x, q.wp = p.wp, q.bias = p.bias, q.ex = p.ex, q.y = y, q.partials = p.partials;
    q.x_vec = q.win % per16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
    // The register epilogue stores pixel pairs (wpad and wout even, Y aligned to two elements) and steps 8 pixels
    // with at most one row wrap: other shapes take the shared-memory one.
    const bool y_pairs = q.wpad % 2 == 0 && q.wout % 2 == 0 &&
                         reinterpret_cast<uintptr_t>(y) % (2 * (q.x_dtype == FUSEDOPS_F32 ? 4 : 2)) == 0;
    if (!y_pairs || q.wpad < 8) q.pre_kind = -1;
    q.done = lp.norm_blocks > 0 ? reinterpret_cast<uint32_t*>(ws + lp.s9l.done_offset) : nullptr;
    e = convt_sm90_pack(p.w, const_cast<float*>(p.wp), q.x_dtype, q.cin, q.cout, q.kh * q.kw, q.three != 0, stream);
    if (e == cudaSuccess && q.done) e = cudaMemsetAsync(q.done, 0, sizeof(uint32_t) * q.batch, stream);
    if (e == cudaSuccess) e = convt_sm90_conv(q, lp.smem, stream);
    if (e == cudaSuccess && q.done) return launch_normaliser(lp, p, q.done, q.batch, stream);
  } else {
    e = cudaLaunchKernel(lp.pack, lp.pack_grid, dim3(kNormThreads), args, 0, stream);
    if (e == cudaSuccess) e = cudaLaunchKernel(lp.conv, lp.conv_grid, dim3(kThreads), args, lp.smem, stream);
  }
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
