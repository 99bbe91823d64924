// ConvTransposeGroupNormAct's convolution on Hopper (issue 13): an implicit GEMM on wgmma, both operands from shared
// memory, for stride-1 transposed convolutions of float32 NCHW X (TF32 products, fp32 accumulation).
//
// One block computes 64 output channels (M) x 512 consecutive pixels of the padded output grid (N: two consumer
// warpgroups of 256) over K = input channels x taps. On the padded grid every tap reads the staged input at the
// output's flat index plus one constant (convt_wgmma.h), so a stage holds input channels [8q, 8q + 8) of one
// contiguous run of padded input slots, laid out K-major as [channel quad][slot][4 channels] (16-byte rows of 8-row
// core matrices), and tap (kh, kw)'s B operand is that stage read from slot shift(kh, kw) on: the 9 taps of a 3x3
// kernel share one staged copy and no operand is ever gathered. The producer warpgroup fills the stages from NCHW X
// with 16-byte loads of 4 channels x 4 columns, rounded to TF32 and transposed in registers (slots outside X stay
// zero), and the chunk's packed weights with one bulk copy; the two consumer warpgroups run one m64n256k8 wgmma per
// tap. Then each consumer warpgroup
// moves its accumulators through shared memory and, one channel row per warp at a time, adds the bias, applies `pre`,
// stores Y (pre-normalisation, coalesced) and writes its tile's exact two-pass statistics per GroupNorm group; the
// finishing and in-place normalise kernels of convt_gn.cu do the rest.
//
// TF32: both operands are rounded to nearest (W when packed, X when staged), as the mma.sync kernel does.
// Measurements: docs/convt.md.
#include "cuda/sm90/convt_wgmma.h"

#include <algorithm>

#include "cuda/sm90/wgmma_ptx.cuh"
#include "cuda/sm90/convt_wgmma_epilogue.cuh"

namespace fusedops {
namespace cuda {

namespace {

using namespace sm90;

constexpr int kLdTile = 256 + 8;  // epilogue tile row stride (floats): = 8 (mod 32), conflict-free float2 stores
constexpr int kMaxStages = 4;
constexpr size_t kExchangeOffset = 64;  // after the barriers full[4], empty[4]: [2 wg][8 row blocks][sum, m2]
constexpr size_t kStagesOffset = 256;
constexpr size_t kEpilogueBytes = size_t(2) * kSm90Cout * kLdTile * sizeof(float) + 2 * 2 * kSm90Cout * sizeof(float);

__host__ __device__ inline uint32_t stage_x_bytes(int32_t span) { return uint32_t(span) * 2u * 16u; }
__host__ __device__ inline uint32_t stage_w_bytes(int32_t taps) { return uint32_t(taps) * 2u * kSm90Cout * 16u; }

__device__ __forceinline__ float tf32(float x) {
  uint32_t t;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(t) : "f"(x));
  return __uint_as_float(t);
}

__global__ void convt_sm90_pack_kernel(const float* __restrict__ w, float* __restrict__ wp, int32_t cin, int32_t cout,
                                       int32_t taps) {
  // wp[ct][q][tap][quad][co 64][4]: one chunk of one channel tile is one contiguous block (one bulk copy).
  const int64_t total = int64_t(cin) * cout * taps;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int e = int(i & 3), col = int((i >> 2) & 63), quad = int((i >> 8) & 1);
    int64_t r = i >> 9;
    const int tap = int(r % taps);
    r /= taps;
    const int chunks = cin / kSm90Chunk;
    const int q = int(r % chunks), ct = int(r / chunks);
    const int ci = q * kSm90Chunk + quad * 4 + e, co = ct * kSm90Cout + col;
    const float v = w[(int64_t(ci) * cout + co) * taps + tap];
    wp[i] = tf32(v);
  }
}

constexpr int kItemsPerPass = 6;  // producer items in flight per thread: 6 x 16 floats of registers

// The producer warpgroup: per channel chunk, every input row the tile's staged slots reach, in items of 4 channels x
// 4 consecutive input columns: 16-byte loads (V4: float32 rows of width % 4 == 0 on 16-byte aligned X) issued before
// the stage is known to be free, then rounded to TF32, transposed in registers and stored as 4 slots of 16 bytes
// ([channel quad][slot][4 channels]). Slots outside X stay zero from the kernel's start.
template <bool V4>
__device__ __forceinline__ void produce(const ConvtSm90Params& p, unsigned char* stages, uint64_t* full,
                                        uint64_t* empty, int m0, int n, int ct) {
  const int tid = threadIdx.x;
  const int taps = p.kh * p.kw;
  const uint32_t x_bytes = stage_x_bytes(p.span), w_bytes = stage_w_bytes(taps), stage_bytes = x_bytes + w_bytes;
  const int64_t plane = int64_t(p.hin) * p.win;
  const float* xn = p.x + int64_t(n) * p.cin * plane;
  const float* wt = p.wp + int64_t(ct) * p.chunks * (w_bytes / 4);
  // Input rows the slots [m0, m0 + span) reach, and the items of a chunk: (channel quad, row, column quad).
  const int iy_lo = max(0, m0 / p.wpad - p.offy);
  const int iy_hi = min(p.hin - 1, (m0 + p.span - 1) / p.wpad - p.offy);
  const int rows = max(0, iy_hi - iy_lo + 1), ncq = (p.win + 3) / 4;
  const int items = 2 * rows * ncq, rows_d = max(rows, 1);
  // Per item of a pass: its offset in a chunk of X, the stage byte offset of its first slot, and masks (bit 4 j + e:
  // column e inside X, to load; then the same for the slots to store). The same for every chunk: with one pass a
  // chunk (items <= kItemsPerPass * 128, model 4's tiles) they are computed once a tile, not once a chunk.
  int isrc[kItemsPerPass], idst[kItemsPerPass];  // (the plan keeps 8 channel planes within int32)
  uint32_t lmask = 0, smask = 0;
  const bool one_pass = items <= kItemsPerPass * 128;
  for (int q = 0; q < p.chunks; ++q) {
    const int st = q % p.stages;
    unsigned char* sx = stages + size_t(st) * stage_bytes;
    const float* xc = xn + int64_t(q) * kSm90Chunk * plane;
    for (int base = 0; base < items || base == 0; base += kItemsPerPass * 128) {
      if (!one_pass || q == 0) {
        lmask = smask = 0;
#pragma unroll
        for (int j = 0; j < kItemsPerPass; ++j) {
          const int i = base + j * 128 + tid;
          const int cq4 = i % ncq, r = (i / ncq) % rows_d, quad = i / (ncq * rows_d);
          const int s0 = (iy_lo + r + p.offy) * p.wpad + 4 * cq4 + p.offx - m0;
          isrc[j] = quad * 4 * int(plane) + (iy_lo + r) * p.win + 4 * cq4;
          idst[j] = (quad * p.span + s0) * 16;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            // A column padding crops (padded column outside [0, wpad)) is read by no output; storing it would
            // land in the neighbouring padded row.
            const int sl = s0 + e, col = 4 * cq4 + e, pcol = col + p.offx;
            if (i < items && col < p.win) lmask |= 1u << (4 * j + e);
            if (i < items && sl >= 0 && sl < p.span && col < p.win && pcol >= 0 && pcol < p.wpad)
              smask |= 1u << (4 * j + e);
          }
        }
      }
      float v[kItemsPerPass][4][4];  // [item][channel][column]
#pragma unroll
      for (int j = 0; j < kItemsPerPass; ++j) {
        const float* src = xc + isrc[j];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (V4) {
            float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
            if (lmask >> (4 * j) & 15u) t = __ldg(reinterpret_cast<const float4*>(src + c * plane));
            v[j][c][0] = t.x, v[j][c][1] = t.y, v[j][c][2] = t.z, v[j][c][3] = t.w;
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) v[j][c][e] = lmask >> (4 * j + e) & 1 ? __ldg(src + c * plane + e) : 0.f;
          }
        }
      }
      if (base == 0) {
        if (q >= p.stages) mbar_wait(empty + st, uint32_t((q / p.stages - 1) & 1));
        if (tid == 0) {
          mbar_arrive_expect_tx(full + st, w_bytes);
          bulk_copy(sx + x_bytes, wt + int64_t(q) * (w_bytes / 4), w_bytes, full + st);
        }
      }
#pragma unroll
      for (int j = 0; j < kItemsPerPass; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (smask >> (4 * j + e) & 1)
            *reinterpret_cast<float4*>(sx + idst[j] + 16 * e) =
                make_float4(tf32(v[j][0][e]), tf32(v[j][1][e]), tf32(v[j][2][e]), tf32(v[j][3][e]));
    }
    fence_proxy_async();
    mbar_arrive(full + st);
  }
}

// kPre: 0 / 1 = `pre` is nothing / GELU alone (the register epilogue); -1 = any other chain (through shared memory).
template <int kPre>
__global__ void __launch_bounds__(kSm90Threads, 1) convt_sm90_kernel(const __grid_constant__ ConvtSm90Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxStages;
  unsigned char* stages = smem + kStagesOffset;
  const int taps = p.kh * p.kw;
  const uint32_t x_bytes = stage_x_bytes(p.span), w_bytes = stage_w_bytes(taps);
  const uint32_t stage_bytes = x_bytes + w_bytes;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int tile = blockIdx.x, ct = blockIdx.y, n = blockIdx.z;
  const int m0 = tile * kSm90Pixels;  // flat padded index of the tile's first pixel (plan: fits int32)

  if (tid == 0) {
    for (int s = 0; s < kMaxStages; ++s) {
      mbar_init(full + s, 128 + 1);  // 128 producer threads + the weights' expect_tx arrival
      mbar_init(empty + s, 256);     // every consumer thread
    }
  }
  // Zeros in every stage's X: the slots outside X are never written by the producer, and they are the same slots
  // for every channel chunk of this tile.
  for (uint32_t i = tid; i < uint32_t(p.stages) * (stage_bytes / 16); i += kSm90Threads)
    if (i % (stage_bytes / 16) < x_bytes / 16) reinterpret_cast<float4*>(stages)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  fence_proxy_async();  // generic-proxy writes the tensor cores (async proxy) will read
  __syncthreads();

  if (warp < 4) {  // ---- producer warpgroup ----
    if (p.x_vec4) produce<true>(p, stages, full, empty, m0, n, ct);
    else produce<false>(p, stages, full, empty, m0, n, ct);
    return;
  }

  // ---- consumer warpgroups: wg 0 computes pixels [m0, m0 + 256), wg 1 [m0 + 256, m0 + 512) ----
  const int wg = (warp - 4) >> 2, wl = warp & 3;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  const uint32_t sbase = smem_u32(stages);
  for (int q = 0; q < p.chunks; ++q) {
    const int st = q % p.stages;
    mbar_wait(full + st, uint32_t((q / p.stages) & 1));
    const uint32_t sx = sbase + uint32_t(st) * stage_bytes, sw = sx + x_bytes;
    wgmma_fence();
    for (int t = 0; t < taps; ++t) {
      const int kh = t / p.kw, kw = t - kh * p.kw;
      const int shift = (p.kh - 1 - kh) * p.dh * p.wpad + (p.kw - 1 - kw) * p.dw;
      const uint64_t da = gmma_desc(sw + uint32_t(t) * 2u * kSm90Cout * 16u, kSm90Cout * 16u, 128u);
      const uint64_t db = gmma_desc(sx + uint32_t(wg * 256 + shift) * 16u, uint32_t(p.span) * 16u, 128u);
      wgmma_m64n256k8_tf32(acc, da, db);
    }
    wgmma_commit();
    wgmma_wait<1>();  // chunk q - 1's MMAs are done: its stage may be refilled
    if (q > 0) mbar_arrive(empty + (q - 1) % p.stages);
  }
  wgmma_wait<0>();
  if constexpr (kPre >= 0) {
    epilogue_registers<kPre>(p, acc, reinterpret_cast<float*>(smem + kExchangeOffset), wg, wl, lane, m0, n, ct, tile);
    return;
  }
  named_sync(1, 256);  // both consumer warpgroups are done with the stages: the epilogue tiles overwrite them

  // Accumulators -> tile [64 channels][256 pixels] of this warpgroup.
  float* tilef = reinterpret_cast<float*>(stages) + size_t(wg) * kSm90Cout * kLdTile;
#pragma unroll
  for (int j = 0; j < 32; ++j)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = wl * 16 + (lane >> 2) + 8 * i, col = 8 * j + 2 * (lane & 3);
      *reinterpret_cast<float2*>(tilef + row * kLdTile + col) = make_float2(acc[4 * j + 2 * i], acc[4 * j + 2 * i + 1]);
    }
  float* rowsum = reinterpret_cast<float*>(stages) + size_t(2) * kSm90Cout * kLdTile + wg * 2 * kSm90Cout;
  float* rowm2 = rowsum + kSm90Cout;
  // This lane's pixels lane + 32 k of the warpgroup's 256: their offsets in a Y plane, and which are outputs (the
  // padded grid's columns past wout and rows past hout are not).
  int yoff[8];
  uint32_t valid = 0;
  const int pix0 = m0 + wg * 256;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int m = pix0 + lane + 32 * k, oy = m / p.wpad, ox = m - oy * p.wpad;
    yoff[k] = oy * p.wout + ox;
    if (ox < p.wout && oy < p.hout) valid |= 1u << k;
  }
  const int nvalid = int(warp_sum32(float(__popc(valid))));
  named_sync(2 + wg, 128);

  const int64_t HW = int64_t(p.hout) * p.wout;
  const int co0 = ct * kSm90Cout;
  // Pass 1, one channel row per warp: bias + pre, store Y, keep the value for pass 2, the row's sum.
  for (int r = wl; r < kSm90Cout; r += 4) {
    const int c = co0 + r;
    const float b = p.bias ? load_param(p.bias, p.param_dtype, c) : 0.f;
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = tilef[r * kLdTile + lane + 32 * k] + b;
    apply_chain_inline<8, false>(p.pre, v, c, p.ex, p.param_dtype);
    float* yrow = p.y + (int64_t(n) * p.cout + c) * HW;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      tilef[r * kLdTile + lane + 32 * k] = v[k];
      if (valid >> k & 1) {
        s += v[k];
        yrow[yoff[k]] = v[k];
      }
    }
    s = warp_sum32(s);
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
    for (int k = 0; k < 8; ++k)
      if (valid >> k & 1) {
        const float d = tilef[r * kLdTile + lane + 32 * k] - mean;
        m2 += d * d;
      }
    m2 = warp_sum32(m2);
    if (lane == 0) rowm2[r] = m2;
  }
  named_sync(2 + wg, 128);
  const int t = tid - 128 - 128 * wg;
  if (t < kSm90Cout / rows_g) {
    float s = 0.f, m2 = 0.f;
    for (int k = 0; k < rows_g; ++k) s += rowsum[t * rows_g + k], m2 += rowm2[t * rows_g + k];
    const int g = (co0 + t * rows_g) / p.Cg;
    const int64_t pbs = 2 * int64_t(p.tiles), pb = 2 * int64_t(tile) + wg;
    p.partials[((int64_t(n) * p.G + g) * pbs + pb) * p.tiles_c + ct] =
        Welford{float(nvalid) * float(rows_g), s * inv_count, m2};
  }
}

}  // namespace

int convt_sm90_built() { return 1; }

size_t convt_sm90_smem(int32_t span, int32_t taps, size_t limit, int32_t* stages) {
  const size_t stage = size_t(stage_x_bytes(span)) + stage_w_bytes(taps);
  for (int s = kMaxStages; s >= 2; --s) {
    const size_t total = kStagesOffset + std::max(size_t(s) * stage, kEpilogueBytes);
    if (total <= limit) {
      *stages = s;
      return total;
    }
  }
  return 0;
}

namespace {
const void* kernel_for(int32_t pre_kind) {
  switch (pre_kind) {
    case 0: return reinterpret_cast<const void*>(convt_sm90_kernel<0>);
    case 1: return reinterpret_cast<const void*>(convt_sm90_kernel<1>);
    default: return reinterpret_cast<const void*>(convt_sm90_kernel<-1>);
  }
}
}  // namespace

int32_t convt_sm90_pre_kind(const fusedops_chain& pre) {
  if (pre.num_steps == 0) return 0;
  if (pre.num_steps == 1 && pre.steps[0].op == FUSEDOPS_STEP_GELU) return 1;
  return -1;
}

cudaError_t convt_sm90_prepare(size_t smem) {
  for (int k = -1; k <= 1; ++k) {
    const cudaError_t e = cudaFuncSetAttribute(kernel_for(k), cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t convt_sm90_pack(const float* w, float* wp, int32_t cin, int32_t cout, int32_t taps, cudaStream_t stream) {
  const int64_t total = int64_t(cin) * cout * taps;
  const unsigned blocks = unsigned(std::min<int64_t>(1024, (total + 255) / 256));
  convt_sm90_pack_kernel<<<blocks, 256, 0, stream>>>(w, wp, cin, cout, taps);
  return cudaGetLastError();
}

cudaError_t convt_sm90_conv(const ConvtSm90Params& p, size_t smem, cudaStream_t stream) {
  void* args[] = {const_cast<ConvtSm90Params*>(&p)};
  return cudaLaunchKernel(kernel_for(p.pre_kind), dim3(unsigned(p.tiles), unsigned(p.tiles_c), unsigned(p.batch)),
                          dim3(kSm90Threads), args, smem, stream);
}

}  // namespace cuda
}  // namespace fusedops
