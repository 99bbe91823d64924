// ConvTransposeGroupNormAct on CUDA (issue 13): the transposed convolution as an implicit GEMM on tensor cores
// (mma.sync m16n8k8 TF32, fp32 accumulation) reading NCHW X directly, whose epilogue adds the bias, applies `pre`,
// stores the pre-normalisation value into Y and writes per-(sample, group) partial statistics of its tile; then a
// finishing kernel (Chan's combine per (sample, group)) and an in-place normalise + `post` pass over Y. No tensor of
// Y's size besides Y; the workspace holds the partials and the (mean, rstd) pairs.
//
// The GEMM of one block: M = TM consecutive output columns of one (sample, output row), N = TN output channels of
// one convolution group, K = that group's input channels x the kernel taps. The gather rule of a transposed
// convolution, out[o] += x[i] * w[k] where i * stride + k * dilation - pad_begin = o, gives for output row oh and tap
// kh one input row ih (the same for the whole block, or none), and for output column ow and tap kw one input column or
// none. So per (kh, chunk of KC input channels) the block stages the input row's span its columns need and the
// weights of every kw, then runs the kw taps out of shared memory.
//
// Precision: float32 X with allow_tf32 = 1 rounds the operands to TF32; allow_tf32 = 0 runs 3xTF32 (each operand
// split into a TF32 high part and a TF32 low part, three products: float32-level error); float16 / bfloat16 operands
// are exact in TF32, so 16-bit X runs the TF32 path with exact products.
#include "cuda/convt_gn.h"

#include <algorithm>
#include <cstdio>

#include "core/message.h"
#include "cuda/device_common.cuh"
#include "cuda/device_query.h"

namespace fusedops {
namespace cuda {

namespace {

constexpr int kTM = 128;      // output columns a block computes
constexpr int kTN = 64;       // output channels a block computes
constexpr int kKC = 64;       // input channels staged at once (model 4: all of them, one stage per kh)
constexpr int kThreads = 256; // 8 warps: 4 along M (32 columns each) x 2 along N (32 channels each)
constexpr int kNormThreads = 256;
constexpr size_t kAlignWs = 256;

__host__ __device__ inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct ConvtParams {
  const void* x;
  const void* w;
  const void* bias;
  const void* gamma;
  const void* beta;
  ExtraPtrs ex;
  void* y;
  Welford* partials;  // [N][G][pixel blocks][channel tiles]
  float2* stats;      // [N][G]: (mean, rstd)
  fusedops_chain pre, post;
  int32_t param_dtype;
  int32_t cin, cout, cin_g, cout_g, groups;  // channels; per convolution group; convolution groups
  int32_t hin, win, hout, wout;
  int32_t kh, kw, sh, sw, ph, pw, dh, dw;
  int32_t G, Cg;            // GroupNorm groups and channels a group
  int32_t tiles_w, tiles_c; // column tiles a row, channel tiles (all convolution groups)
  int32_t span;             // input columns staged per (kh, channel chunk); row stride of the stage is ldx
  int32_t ldx;
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

// What the stage holds: the float32 value for 3xTF32 (split per use), else its TF32 rounding (bits in a float).
template <bool THREE>
__device__ __forceinline__ float stage_value(float v) {
  return THREE ? v : __uint_as_float(to_tf32(v));
}

// Shared memory of the convolution kernel: the input stage [kKC][ldx] and the weights [KW][kKC][kTN + 8], both
// float; after the main loop the same memory holds the block's output tile [kTN][kTM + 4] for the epilogue.
size_t conv_smem_bytes(int ldx, int kw) {
  const size_t main = (size_t(kKC) * ldx + size_t(kw) * kKC * (kTN + 8)) * sizeof(float);
  const size_t tile = size_t(kTN) * (kTM + 4) * sizeof(float);
  return std::max(main, tile);
}

template <typename T, bool THREE>
__global__ void __launch_bounds__(kThreads, 2) convt_kernel(const __grid_constant__ ConvtParams p) {
  extern __shared__ float4 smem_f4[];
  float* smem = reinterpret_cast<float*>(smem_f4);
  float* xs = smem;                        // [kKC][ldx]
  float* ws = smem + size_t(kKC) * p.ldx;  // [kw][kKC][kTN + 8]
  constexpr int ldw = kTN + 8;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g8 = lane >> 2, t4 = lane & 3;
  const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;
  const int64_t pb = blockIdx.x;  // pixel block: output row and column tile
  const int oh = int(pb / p.tiles_w), ow0 = int(pb % p.tiles_w) * kTM;
  const int ct = blockIdx.y;      // channel tile, inside one convolution group
  const int tiles_per_group = int(ceil_div(p.cout_g, kTN));
  const int cg = ct / tiles_per_group, co_local0 = (ct % tiles_per_group) * kTN;
  const int co0 = cg * p.cout_g + co_local0;                 // first output channel of the tile
  const int nco = min(kTN, p.cout_g - co_local0);            // channels of the tile
  const int n = blockIdx.z;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const T* __restrict__ w = static_cast<const T*>(p.w);
  // The input columns the tile's output columns can reach: [iw_lo, iw_lo + span).
  const int iw_lo_num = ow0 + p.pw - (p.kw - 1) * p.dw;
  const int iw_lo = iw_lo_num >= 0 ? iw_lo_num / p.sw : -((-iw_lo_num + p.sw - 1) / p.sw);

  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

  for (int kh = 0; kh < p.kh; ++kh) {
    const int ih_num = oh + p.ph - kh * p.dh;
    if (ih_num < 0 || ih_num % p.sh != 0) continue;  // block-uniform
    const int ih = ih_num / p.sh;
    if (ih >= p.hin) continue;
    for (int c0 = 0; c0 < p.cin_g; c0 += kKC) {
      __syncthreads();  // the previous chunk's stage is no longer read
      // Staged with 2-D thread maps (warp -> input channels, lane -> columns / output channels): no division per
      // element, kKC / 8 (X) or 2 * kKC / 8 (W) loads in flight per thread. Operands are stored as TF32 bit patterns
      // (rounded once here, not per use) except in 3xTF32 mode, which splits the float32 values per use. Column
      // `span` of every X row is zero: the fragment loads of absent input columns read it instead of branching.
      // (First GPU run: one division per staged element and per-use conversions made the kernel integer-issue-bound.)
      const T* __restrict__ xrow = x + ((int64_t(n) * p.cin + cg * p.cin_g + c0) * p.hin + ih) * p.win;
      const int64_t plane = int64_t(p.hin) * p.win;
      for (int j = lane; j <= p.span; j += 32) {
        const int iw = iw_lo + j;
        const bool in_row = j < p.span && iw >= 0 && iw < p.win;
        float v[kKC / 8];
#pragma unroll
        for (int r = 0; r < kKC / 8; ++r) {
          const int c = warp + 8 * r;
          v[r] = in_row && c0 + c < p.cin_g ? to_float(xrow[c * plane + iw]) : 0.f;
        }
#pragma unroll
        for (int r = 0; r < kKC / 8; ++r) xs[(warp + 8 * r) * p.ldx + j] = stage_value<THREE>(v[r]);
      }
      // W is (Cin, C / groups, KH, KW): element (ci, co_local, kh, kw); stored [kw][ci][co].
      const int khw = p.kh * p.kw;
      const T* __restrict__ wbase = w + (int64_t(cg * p.cin_g + c0) * p.cout_g + co_local0) * khw + kh * p.kw;
      for (int kwh = 0; kwh < 2 * p.kw; ++kwh) {  // (kw, half of the channel tile): kKC / 8 loads in flight
        const int kw = kwh >> 1, co = lane + 32 * (kwh & 1);
        float v[kKC / 8];
#pragma unroll
        for (int r = 0; r < kKC / 8; ++r) {
          const int c = warp + 8 * r;
          v[r] = c0 + c < p.cin_g && co < nco ? to_float(wbase[(int64_t(c) * p.cout_g + co) * khw + kw]) : 0.f;
        }
#pragma unroll
        for (int r = 0; r < kKC / 8; ++r) ws[(kw * kKC + warp + 8 * r) * ldw + co] = stage_value<THREE>(v[r]);
      }
      __syncthreads();
      for (int kw = 0; kw < p.kw; ++kw) {
        // Stage column of each of this thread's four output rows (m = g8, g8 + 8 of each 16-row tile), -1: none.
        int col[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int num = ow0 + wm + mt * 16 + g8 + h * 8 + p.pw - kw * p.dw;
            const int q = num >= 0 ? num / p.sw : -1;
            col[mt][h] = (num >= 0 && q * p.sw == num && q < p.win) ? q - iw_lo : p.span;  // span: the zero column
          }
        const float* wk = ws + kw * kKC * ldw;
#pragma unroll
        for (int k8 = 0; k8 < kKC; k8 += 8) {
          float af[2][4], bf[4][2];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            const float* r0 = xs + (k8 + t4) * p.ldx;
            const float* r4 = xs + (k8 + t4 + 4) * p.ldx;
            af[mt][0] = r0[col[mt][0]];
            af[mt][1] = r0[col[mt][1]];
            af[mt][2] = r4[col[mt][0]];
            af[mt][3] = r4[col[mt][1]];
          }
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            bf[nt][0] = wk[(k8 + t4) * ldw + wn + nt * 8 + g8];
            bf[nt][1] = wk[(k8 + t4 + 4) * ldw + wn + nt * 8 + g8];
          }
          uint32_t ah[2][4], bh[4][2];  // TF32: the staged bits as they are; 3xTF32: the high parts
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) ah[mt][e] = THREE ? to_tf32(af[mt][e]) : __float_as_uint(af[mt][e]);
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) bh[nt][e] = THREE ? to_tf32(bf[nt][e]) : __float_as_uint(bf[nt][e]);
          if constexpr (THREE) {  // small products first: hi*lo + lo*hi, then hi*hi
            uint32_t al[2][4], bl[4][2];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
              for (int e = 0; e < 4; ++e) al[mt][e] = to_tf32(af[mt][e] - __uint_as_float(ah[mt][e]));
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) bl[nt][e] = to_tf32(bf[nt][e] - __uint_as_float(bh[nt][e]));
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
              for (int nt = 0; nt < 4; ++nt) {
                mma_tf32(acc[mt][nt], ah[mt], bl[nt]);
                mma_tf32(acc[mt][nt], al[mt], bh[nt]);
              }
          }
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) mma_tf32(acc[mt][nt], ah[mt], bh[nt]);
        }
      }
    }
  }

  // Epilogue: bias + pre into the shared tile [kTN][kTM + 4], then coalesced stores and the tile's group statistics.
  __syncthreads();
  constexpr int ldt = kTM + 4;
  float* tile = smem;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = wm + mt * 16 + g8 + (e >> 1) * 8;
        const int cl = wn + nt * 8 + t4 * 2 + (e & 1);
        float v[1] = {acc[mt][nt][e]};
        if (cl < nco) {
          const int co = co0 + cl;
          if (p.bias) v[0] += load_param(p.bias, p.param_dtype, co);
          apply_chain<1, false>(&p.pre, v, co, &p.ex, p.param_dtype);
        }
        tile[cl * ldt + m] = v[0];
      }
  __syncthreads();
  const int ncol = min(kTM, p.wout - ow0);
  T* y = static_cast<T*>(p.y);
  const int64_t S = int64_t(p.hout) * p.wout;
  for (int i = tid; i < nco * kTM; i += kThreads) {
    const int cl = i / kTM, m = i - cl * kTM;
    if (m < ncol) y[(int64_t(n) * p.cout + co0 + cl) * S + int64_t(oh) * p.wout + ow0 + m] = from_float<T>(tile[cl * ldt + m]);
  }
  // One warp per GroupNorm group touching the tile: exact two-pass moments over the tile's part of the group.
  const int g_first = co0 / p.Cg, g_last = (co0 + nco - 1) / p.Cg;
  for (int g = g_first + warp; g <= g_last; g += kThreads / 32) {
    const int c_lo = max(g * p.Cg, co0) - co0, c_hi = min((g + 1) * p.Cg, co0 + nco) - co0;
    const int count = (c_hi - c_lo) * ncol;
    float s = 0.f;
    for (int c = c_lo; c < c_hi; ++c)
      for (int m = lane; m < ncol; m += 32) s += tile[c * ldt + m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = s / float(count);
    float m2 = 0.f;
    for (int c = c_lo; c < c_hi; ++c)
      for (int m = lane; m < ncol; m += 32) {
        const float d = tile[c * ldt + m] - mean;
        m2 += d * d;
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m2 += __shfl_xor_sync(0xffffffffu, m2, o);
    if (lane == 0) {
      const int64_t pbs = int64_t(p.hout) * p.tiles_w;
      p.partials[((int64_t(n) * p.G + g) * pbs + pb) * p.tiles_c + ct] = Welford{float(count), mean, m2};
    }
  }
}

// (mean, rstd) of one (sample, group) per block from the partials of every pixel block and channel tile it touches.
__global__ void __launch_bounds__(kNormThreads) convt_finish_kernel(const __grid_constant__ ConvtParams p) {
  const int64_t gi = blockIdx.x;  // n * G + g
  const int g = int(gi % p.G);
  const int64_t pbs = int64_t(p.hout) * p.tiles_w;
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
  const int64_t end = min(S, (int64_t(blockIdx.y) + 1) * chunk);
  for (int64_t i = int64_t(blockIdx.y) * chunk + threadIdx.x; i < end; i += blockDim.x) {
    float v[1] = {(to_float(y[i]) - st.x) * scale + b};
    apply_chain<1, false>(&p.post, v, c, &p.ex, p.param_dtype);
    y[i] = from_float<T>(v[0]);
  }
}

template <typename T>
const void* conv_kernel(bool three) {
  return three ? reinterpret_cast<const void*>(convt_kernel<T, true>)
               : reinterpret_cast<const void*>(convt_kernel<T, false>);
}
template <typename T>
const void* normalize_kernel() {
  return reinterpret_cast<const void*>(convt_normalize_kernel<T>);
}

struct Layout {
  int32_t tiles_w, tiles_c, span, ldx;
  int64_t pixel_blocks;
  size_t partials_bytes, stats_offset, total;
};

Layout layout(const fusedops_op_desc& d) {
  const fusedops_conv_desc& cv = d.conv;
  const bool one_d = cv.spatial_rank == 1;
  const int64_t wout = one_d ? cv.output[0] : cv.output[1];
  const int64_t hout = one_d ? 1 : cv.output[0];
  const int sw = one_d ? cv.strides[0] : cv.strides[1], kw = one_d ? cv.kernel[0] : cv.kernel[1];
  const int dw = one_d ? cv.dilations[0] : cv.dilations[1];
  Layout l{};
  l.tiles_w = int32_t(ceil_div(wout, kTM));
  l.tiles_c = int32_t(cv.group * ceil_div(d.d.gn.C / cv.group, kTN));
  l.span = int32_t((kTM - 1 + (kw - 1) * dw) / sw + 2);
  l.ldx = int32_t(align_up(size_t(l.span), 32) + 8);  // row stride = 8 (mod 32): conflict-free fragment loads
  l.pixel_blocks = hout * l.tiles_w;
  const int64_t groups = d.d.gn.N * d.d.gn.num_groups;
  l.partials_bytes = size_t(groups) * size_t(l.pixel_blocks) * size_t(l.tiles_c) * sizeof(Welford);
  l.stats_offset = align_up(l.partials_bytes, kAlignWs);
  l.total = kAlignWs + l.stats_offset + size_t(groups) * sizeof(float2);
  return l;
}

}  // namespace

struct ConvtLaunch {
  ConvtParams base{};
  const void* conv = nullptr;
  const void* normalize = nullptr;
  size_t smem = 0;
  dim3 conv_grid, finish_grid, norm_grid;
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
                       "%s: the CUDA kernel has no channel reduction yet (reduce '%s')", op,
                       gn.reduce == FUSEDOPS_REDUCE_MIN ? "min" : "...");
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
  b.tiles_w = l.tiles_w;
  b.tiles_c = l.tiles_c;
  b.span = l.span;
  b.ldx = l.ldx;
  b.eps = gn.epsilon;
  if (gn.N > 65535 || l.tiles_c > 65535 || l.pixel_blocks > INT32_MAX)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: batch %lld, %d channel tiles or %lld pixel blocks exceed the kernel's grid", op,
                       (long long)gn.N, l.tiles_c, (long long)l.pixel_blocks);
  const bool three = gn.x_dtype == FUSEDOPS_F32 && !d.d.allow_tf32;
  switch (gn.x_dtype) {
    case FUSEDOPS_F16: p->conv = conv_kernel<__half>(false), p->normalize = normalize_kernel<__half>(); break;
    case FUSEDOPS_BF16:
      p->conv = conv_kernel<__nv_bfloat16>(false), p->normalize = normalize_kernel<__nv_bfloat16>();
      break;
    default: p->conv = conv_kernel<float>(three), p->normalize = normalize_kernel<float>(); break;
  }
  p->smem = conv_smem_bytes(l.ldx, b.kw);
  if (!allow_smem(p->conv, p->smem))
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: %zu bytes of shared memory per block (kernel width %d, dilation %d, stride %d) exceed "
                       "this device's limit", op, p->smem, b.kw, b.dw, b.sw);
  p->conv_grid = dim3(unsigned(l.pixel_blocks), unsigned(l.tiles_c), unsigned(gn.N));
  p->finish_grid = dim3(unsigned(gn.N * gn.num_groups));
  const int64_t S = int64_t(b.hout) * b.wout;
  const int64_t chunks = std::min<int64_t>(65535, ceil_div(S, int64_t(kNormThreads) * 16));
  p->norm_chunk = ceil_div(S, chunks);
  p->norm_grid = dim3(unsigned(gn.N * gn.C), unsigned(ceil_div(S, p->norm_chunk)));
  p->l = l;
  *workspace = l.total;
  char text[256];
  std::snprintf(text, sizeof text, "convt_igemm(%s,%dx%d,smem=%zu) + gn_stats_finish + gn_normalize_inplace",
                three ? "3xtf32" : gn.x_dtype == FUSEDOPS_F32 ? "tf32" : gn.x_dtype == FUSEDOPS_F16 ? "f16>tf32"
                                                                                                    : "bf16>tf32",
                kTM, kTN, p->smem);
  *kernels = text;
  *out = std::move(p);
  return FUSEDOPS_OK;
}

cudaError_t convt_run(const ConvtLaunch& lp, const void* const* in, int32_t num_inputs, void* y, void* workspace,
                      cudaStream_t stream) {
  ConvtParams p = lp.base;
  p.x = in[0];
  p.w = in[1];
  p.bias = in[2];
  p.gamma = in[3];
  p.beta = in[4];
  for (int k = 0; k < FUSEDOPS_MAX_EXTRAS; ++k) p.ex.p[k] = 5 + k < num_inputs ? in[5 + k] : nullptr;
  p.y = y;
  char* ws = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(workspace), kAlignWs));
  p.partials = reinterpret_cast<Welford*>(ws);
  p.stats = reinterpret_cast<float2*>(ws + lp.l.stats_offset);
  void* args[2] = {&p, nullptr};
  cudaError_t e = cudaLaunchKernel(lp.conv, lp.conv_grid, dim3(kThreads), args, lp.smem, stream);
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
