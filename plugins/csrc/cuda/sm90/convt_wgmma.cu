// ConvTransposeGroupNormAct's convolution on Hopper (issue 13): an implicit GEMM on wgmma, both operands from shared
// memory, for stride-1 transposed convolutions of float32 NCHW X (TF32 products, fp32 accumulation).
//
// A tile is 64 output channels (M) x 512 consecutive pixels of the padded output grid (N: two consumer warpgroups
// of 256) over K = input channels x taps; persistent blocks (one an SM) walk the tiles, so the producer fills the
// next tile's stages while the consumers run the last one's epilogue. On the padded grid every tap reads the staged
// input at the output's flat index plus one constant (convt_wgmma.h), so a stage holds input channels [8q, 8q + 8) of
// one contiguous run of padded input slots, laid out K-major as [channel quad][slot][4 channels] (16-byte rows of
// 8-row core matrices), and tap (kh, kw)'s B operand is that stage read from slot shift(kh, kw) on: the 9 taps of a
// 3x3 kernel share one staged copy and no operand is ever gathered. Two producer warpgroups fill the stages from NCHW
// X with 16-byte loads of 4 channels x 4 columns, rounded to TF32 and transposed in registers (slots outside X are
// zeroed once a tile), and the chunk's packed weights with one bulk copy; the two consumer warpgroups run two
// m64n128k8 wgmmas per tap (setmaxnreg moves registers from the producers to them). The epilogue
// (convt_wgmma_epilogue.cuh) adds the bias, applies `pre`, stores Y (pre-normalisation) and writes the tile's exact
// two-pass statistics per GroupNorm group; the finishing and in-place normalise kernels of convt_gn.cu do the rest.
//
// TF32: both operands are rounded to nearest (W when packed, X when staged), as the mma.sync kernel does.
// Measurements: docs/convt.md.
#include "cuda/sm90/convt_wgmma.h"

#include <algorithm>
#include <type_traits>

#include "cuda/sm90/wgmma_ptx.cuh"
#include "cuda/sm90/convt_wgmma_epilogue.cuh"
#include "cuda/sm90/convt_wgmma_producers.cuh"

namespace fusedops {
namespace cuda {

namespace {

using namespace sm90;

constexpr int kMaxStages = 4;
constexpr size_t kExchangeOffset = 64;  // after the barriers full[4], empty[4]: [2 wg][8 row blocks][sum, m2]
constexpr size_t kRingBarriersOffset = 192;  // after the exchange: the W ring's wfull[3], wempty[3]
constexpr size_t kStagesOffset = 256;
constexpr size_t kEpilogueBytes = size_t(2) * kSm90Cout * kLdTile * sizeof(float) + 2 * 2 * kSm90Cout * sizeof(float);

// W [cin][cout][kh][kw] into wp[ct][q][tap][core][co 64][E]: E = 16 bytes of T (4 float32, TF32-rounded, or 8
// 16-bit values), a chunk 2 E input channels; one chunk of one channel tile is one contiguous block (one bulk copy).
template <typename T>
__global__ void convt_sm90_pack_kernel(const T* __restrict__ w, T* __restrict__ wp, int32_t cin, int32_t cout,
                                       int32_t taps, bool three) {
  constexpr int E = 16 / int(sizeof(T));
  const int64_t total = int64_t(cin) * cout * taps;
  const int chunks = cin / (2 * E);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int e = int(i % E), col = int((i / E) % kSm90Cout), core = int((i / (E * kSm90Cout)) % 2);
    int64_t r = i / (2 * E * kSm90Cout);
    const int tap = int(r % taps);
    r /= taps;
    const int q = int(r % chunks), ct = int(r / chunks);
    const int ci = q * 2 * E + core * E + e, co = ct * kSm90Cout + col;
    const T v = w[(int64_t(ci) * cout + co) * taps + tap];
    if constexpr (std::is_same_v<T, float>) {
      if (three) {  // chunk r = ct * chunks + q: its hi block, then its lo block, one bulk copy apart
        const int64_t block = int64_t(taps) * 2 * E * kSm90Cout, at = (i / block) * 2 * block + i % block;
        wp[at] = tf32(v);
        wp[at + block] = tf32(v - tf32(v));
      } else {
        wp[i] = tf32(v);
      }
    } else {
      wp[i] = v;
    }
  }
}

// T: X's type (float32: TF32 products). kPre: 0 / 1 = `pre` is nothing / GELU alone (the register epilogue); -1 = any
// other chain (through shared memory). kRing (float32 TF32, kPre >= 0, one channel tile): X staged through the raw
// ring (produce_ring) and W in its own ring of kWRing chunks, so a stage holds X only.
template <typename T, int kPre, bool kThree, bool kRing = false>
__global__ void __launch_bounds__(kSm90Threads, 1) convt_sm90_kernel(const __grid_constant__ ConvtSm90Params p) {
  static_assert(!kRing || (std::is_same_v<T, float> && kPre >= 0 && !kThree), "the ring takes float32 TF32 only");
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxStages;
  uint64_t* wfull = reinterpret_cast<uint64_t*>(smem + kRingBarriersOffset);  // kRing only
  uint64_t* wempty = wfull + kWRing;
  unsigned char* stages = smem + kStagesOffset;
  constexpr uint32_t kParts = kThree ? 2 : 1;  // 3xTF32: [X hi][X lo][W hi][W lo] a stage
  // Pixels of a tile, of a consumer warpgroup's part, and its accumulators a thread (convt_wgmma.h: 3xTF32 halves
  // the tile for its fresh accumulators).
  constexpr int kPix = convt_sm90_tile_pixels(kThree), kWgPix = kPix / 2, kAcc = kWgPix / 2;
  const int taps = p.kh * p.kw;
  const uint32_t x_bytes = stage_x_bytes(p.span), w_bytes = stage_w_bytes(taps);
  const uint32_t stage_bytes = kRing ? x_bytes : kParts * (x_bytes + w_bytes);
  unsigned char* wring = stages + size_t(p.stages) * stage_bytes;  // kRing: [kWRing][w_bytes], then the raw ring
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // A normaliser kernel behind this one (p.done) may start now, on the SMs this grid leaves free.
  if (p.done != nullptr) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  if (tid == 0) {
    for (int s = 0; s < kMaxStages; ++s) {
      // every producer thread, + the weights' expect_tx arrival where W comes with the stage
      mbar_init(full + s, kSm90Producers + (kRing ? 0 : 1));
      mbar_init(empty + s, 256);  // every consumer thread
    }
    if constexpr (kRing)
      for (int s = 0; s < kWRing; ++s) mbar_init(wfull + s, 1), mbar_init(wempty + s, 256);
  }
  // Zeros in the stages' X once: not needed for the results (the producer zeroes each tile's outside slots), but
  // without this loop ptxas (13.0) serialises the MMAs of this kernel (warning C7520); measured, kept.
  for (uint32_t i = tid; i < uint32_t(p.stages) * (stage_bytes / 16); i += kSm90Threads)
    if (i % (stage_bytes / 16) < kParts * x_bytes / 16)
      reinterpret_cast<float4*>(stages)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  fence_proxy_async();
  __syncthreads();

  // Persistent: block b takes tiles b, b + gridDim.x, ... (channel tile fastest, then pixel tile, then sample, so
  // neighbouring blocks share X's rows in L2); producer and consumers walk the same sequence in their own loops, so
  // chunk g of the block is chunk g % chunks of its (g / chunks)-th tile, in stage g % stages.
  // The tile count (plan: fits int32) is computed in each role after setmaxnreg: computed once before it, ptxas kept
  // it in local memory and reloaded it every tile (13.0).
  if (warp < kSm90Producers / 32) {  // ---- producer warpgroups ----
    setmaxnreg_dec<kSm90ProducerRegs>();
    const int total = p.tiles * p.tiles_c * p.batch, per_n = p.tiles_c * p.tiles;
    // kRing: the block's chunk count over all its tiles (W runs ahead across tiles, and must stop at the end)
    const int g_end = (total - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x) * p.chunks;
    if constexpr (kRing)
      if (tid == 0)
        for (int g = 0; g < kWAhead && g < g_end; ++g) issue_w(p, wring, wfull, wempty, g);
    int g0 = 0;
    for (int t = blockIdx.x; t < total; t += gridDim.x, g0 += p.chunks) {
      const int ct = t % p.tiles_c, m0 = t / p.tiles_c % p.tiles * kPix, n = t / per_n;
      if constexpr (kRing) {
        produce_ring(p, stages, wring, reinterpret_cast<float*>(wring + size_t(kWRing) * w_bytes), full, empty,
                     wfull, wempty, m0, n, g0, g_end);
      } else if constexpr (std::is_same_v<T, float>) {
        if (p.x_vec) produce<true, kThree>(p, stages, full, empty, m0, n, ct, g0);
        else produce<false, kThree>(p, stages, full, empty, m0, n, ct, g0);
      } else {
        if (p.x_vec) produce16<T, true>(p, stages, full, empty, m0, n, ct, g0);
        else produce16<T, false>(p, stages, full, empty, m0, n, ct, g0);
      }
      // The shared-memory epilogue writes its tile over the stages: the next tile's staging waits for it.
      if constexpr (kPre < 0) named_sync(4, kSm90Threads);
    }
    return;
  }

  // ---- consumer warpgroups: wg 0 computes pixels [m0, m0 + kWgPix) of a tile, wg 1 the next kWgPix ----
  setmaxnreg_inc<kSm90ConsumerRegs>();
  const int total = p.tiles * p.tiles_c * p.batch, per_n = p.tiles_c * p.tiles;
  const int wg = (warp - kSm90Producers / 32) >> 2, wl = warp & 3;
  const uint32_t sbase = smem_u32(stages);
  float acc[kAcc];  // TF32 / 16-bit: a tile's first MMA overwrites it; 3xTF32: zeroed per tile (below)
  // Per tap, the descriptors step by constants (no integer division in the MMA issue loop: ncu put the per-tap
  // `k / kw` and descriptor arithmetic at a fifth of the consumers' stall samples). A descriptor's address field is
  // its low 14 bits (bytes / 16, shared memory < 256 KB), so adding to the 64-bit word moves the address only.
  const int shift0 = (p.kh - 1) * p.dh * p.wpad + (p.kw - 1) * p.dw;  // tap 0's shift (slots)
  const int row_step = (p.kw - 1) * p.dw - p.dh * p.wpad;             // the shift's change at a kernel row's end
  const uint64_t w_tap = 2u * kSm90Cout, x_lo = x_bytes / 16u, w_lo = w_bytes / 16u;  // in 16-byte units
  constexpr uint64_t kHalf = 128;  // the second n128 half's first slot (one 16-byte slot a pixel)
  int st = 0;  // the stage of the block's current chunk, and its full barrier's phase parity
  uint32_t phase = 0;
  int wst = 0;  // kRing: the W ring slot of the current chunk, and its phase parity
  uint32_t wphase = 0;
  for (int t = blockIdx.x; t < total; t += gridDim.x) {
    if constexpr (kThree) {  // 0 + the first kernel row's sums is those sums: the row loop's add needs no select
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    }
    for (int q = 0; q < p.chunks; ++q) {
      mbar_wait(full + st, phase);
      const uint32_t sx = sbase + uint32_t(st) * stage_bytes;
      uint32_t sw = sx + kParts * x_bytes;
      if constexpr (kRing) {
        mbar_wait(wfull + wst, wphase);
        sw = smem_u32(wring) + uint32_t(wst) * w_bytes;
      }
      const uint64_t da0 = gmma_desc(sw, kSm90Cout * 16u, 128u);
      const uint64_t db0 = gmma_desc(sx + uint32_t(wg * kWgPix) * 16u, uint32_t(p.span) * 16u, 128u);
      if constexpr (kThree) {
        // A kernel row's products (the small ones first: W lo · X hi, W hi · X lo, then W hi · X hi) into fresh
        // accumulators, added into the running sums with IEEE adds (convt_wgmma.h). The other warpgroup's MMAs
        // keep the tensor cores busy while this one waits and adds. The stage is free after the chunk's last row.
        int row_shift = shift0;
        for (int k0 = 0; k0 < taps; k0 += p.kw, row_shift -= p.dh * p.wpad) {
          float fresh[kAcc];  // declared here: nothing of the last row's values stays live (the epilogue's registers)
          fence_operand(fresh);
          wgmma_fence();
          for (int kw = 0; kw < p.kw; ++kw) {
            const uint64_t da = da0 + uint64_t(k0 + kw) * w_tap, db = db0 + uint64_t(row_shift - kw * p.dw);
            wgmma_m64n128k8_tf32<0>(fresh, da + w_lo, db, kw != 0);
            wgmma_m64n128k8_tf32<0>(fresh, da, db + x_lo, 1);
            wgmma_m64n128k8_tf32<0>(fresh, da, db, 1);
          }
          wgmma_commit();
          wgmma_wait<0>();
          fence_operand(fresh);
#pragma unroll
          for (int i = 0; i < kAcc; ++i) acc[i] += fresh[i];
        }
        mbar_arrive(empty + st);
      } else {
        fence_operand(acc);
        wgmma_fence();
        int shift = shift0, kw = 0;
        for (int k = 0; k < taps; ++k) {
          const uint64_t da = da0 + uint64_t(k) * w_tap, db = db0 + uint64_t(shift);
          const uint32_t accumulate = (q | k) != 0;
          // Each tap is two n128 MMAs (wgmma_ptx.cuh: no n256 at 512 threads), pixels [0, 128) and [128, 256)
          // of the warpgroup's 256, 128 slots apart in the stage.
          if constexpr (std::is_same_v<T, float>) {
            wgmma_m64n128k8_tf32<0>(acc, da, db, accumulate);
            wgmma_m64n128k8_tf32<1>(acc, da, db + kHalf, accumulate);
          } else {
            wgmma_m64n128k16<0, T>(acc, da, db, accumulate);
            wgmma_m64n128k16<1, T>(acc, da, db + kHalf, accumulate);
          }
          if (++kw == p.kw) kw = 0, shift += row_step;
          else shift -= p.dw;
        }
        wgmma_commit();
        wgmma_wait<1>();  // chunk g - 1's MMAs are done: its stage may be refilled
        if (q > 0) {
          mbar_arrive(empty + (st == 0 ? p.stages - 1 : st - 1));
          if constexpr (kRing) mbar_arrive(wempty + (wst == 0 ? kWRing - 1 : wst - 1));
        }
      }
      if (++st == p.stages) st = 0, phase ^= 1u;
      if constexpr (kRing)
        if (++wst == kWRing) wst = 0, wphase ^= 1u;
    }
    if constexpr (!kThree) {
      wgmma_wait<0>();
      fence_operand(acc);
      mbar_arrive(empty + (st == 0 ? p.stages - 1 : st - 1));  // the producer may fill the next tile meanwhile
      if constexpr (kRing) mbar_arrive(wempty + (wst == 0 ? kWRing - 1 : wst - 1));
    }
    // The tile's coordinates only now: live across the mainloop they would push the accumulators into local memory.
    const int ct = t % p.tiles_c, tile = t / p.tiles_c % p.tiles, n = t / per_n;
    const int m0 = tile * kPix;  // flat padded index of the tile's first pixel (plan: fits int32)
    if constexpr (kPre >= 0) {
      epilogue_registers<T, kPre>(p, acc, reinterpret_cast<float*>(smem + kExchangeOffset), wg, wl, lane, m0, n, ct,
                                  tile);
    } else {
      epilogue_shared<T>(p, acc, stages, wg, wl, lane, m0, n, ct, tile);
      named_sync(4, kSm90Threads);
    }
  }
}

}  // namespace

int convt_sm90_built() { return 1; }

size_t convt_sm90_smem(int32_t span, int32_t taps, bool three, size_t ring_chunk, size_t limit, int32_t* stages,
                       int32_t* ring) {
  const size_t stage = size_t(three ? 2 : 1) * (size_t(stage_x_bytes(span)) + stage_w_bytes(taps));
  *ring = 0;
  // The ring producer: two X-only stages, W's ring and the raw ring after them (the kernels that run the
  // shared-memory epilogue over the stages never use the rings, but need kEpilogueBytes).
  if (ring_chunk > 0) {
    const size_t rings = 2 * size_t(stage_x_bytes(span)) + size_t(kWRing) * stage_w_bytes(taps) + kXRing * ring_chunk;
    const size_t total = kStagesOffset + std::max({rings, 2 * stage, kEpilogueBytes});
    if (total <= limit) {
      *stages = 2, *ring = kXRing;
      return total;
    }
  }
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
template <typename T, bool kThree = false>
const void* kernel_of(int32_t pre_kind) {
  switch (pre_kind) {
    case 0: return reinterpret_cast<const void*>(convt_sm90_kernel<T, 0, kThree>);
    case 1: return reinterpret_cast<const void*>(convt_sm90_kernel<T, 1, kThree>);
    default: return reinterpret_cast<const void*>(convt_sm90_kernel<T, -1, kThree>);
  }
}
// The ring producer's kernels: float32 TF32 with the register epilogue only.
const void* ring_kernel_for(int32_t pre_kind) {
  return pre_kind == 0 ? reinterpret_cast<const void*>(convt_sm90_kernel<float, 0, false, true>)
                       : reinterpret_cast<const void*>(convt_sm90_kernel<float, 1, false, true>);
}
const void* kernel_for(int32_t x_dtype, int32_t pre_kind, bool three) {
  switch (x_dtype) {
    case FUSEDOPS_BF16: return kernel_of<__nv_bfloat16>(pre_kind);
    case FUSEDOPS_F16: return kernel_of<__half>(pre_kind);
    default: return three ? kernel_of<float, true>(pre_kind) : kernel_of<float>(pre_kind);
  }
}
}  // namespace

int32_t convt_sm90_pre_kind(const fusedops_chain& pre) {
  if (pre.num_steps == 0) return 0;
  if (pre.num_steps == 1 && pre.steps[0].op == FUSEDOPS_STEP_GELU) return 1;
  return -1;
}

cudaError_t convt_sm90_prepare(size_t smem) {
  for (int32_t dtype : {FUSEDOPS_F32, FUSEDOPS_BF16, FUSEDOPS_F16})
    for (int k = -1; k <= 1; ++k)
      for (bool three : {false, true}) {
        const cudaError_t e = cudaFuncSetAttribute(kernel_for(dtype, k, three),
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (e != cudaSuccess) return e;
      }
  for (int k = 0; k <= 1; ++k) {
    const cudaError_t e =
        cudaFuncSetAttribute(ring_kernel_for(k), cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t convt_sm90_pack(const void* w, void* wp, int32_t x_dtype, int32_t cin, int32_t cout, int32_t taps,
                            bool three, cudaStream_t stream) {
  const int64_t total = int64_t(cin) * cout * taps;
  const unsigned blocks = unsigned(std::min<int64_t>(1024, (total + 255) / 256));
  switch (x_dtype) {
    case FUSEDOPS_BF16:
      convt_sm90_pack_kernel<<<blocks, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(w),
                                                         static_cast<__nv_bfloat16*>(wp), cin, cout, taps, false);
      break;
    case FUSEDOPS_F16:
      convt_sm90_pack_kernel<<<blocks, 256, 0, stream>>>(static_cast<const __half*>(w), static_cast<__half*>(wp), cin,
                                                         cout, taps, false);
      break;
    default:
      convt_sm90_pack_kernel<<<blocks, 256, 0, stream>>>(static_cast<const float*>(w), static_cast<float*>(wp), cin,
                                                         cout, taps, three);
  }
  return cudaGetLastError();
}

cudaError_t convt_sm90_conv(const ConvtSm90Params& p, size_t smem, cudaStream_t stream) {
  void* args[] = {const_cast<ConvtSm90Params*>(&p)};
  // The plan's ring where this call allows it (X aligned, the register epilogue), else the same plan's stages (two)
  // with the register producer.
  const bool ring = p.ring > 0 && p.x_vec && p.pre_kind >= 0 && p.x_dtype == FUSEDOPS_F32 && !p.three;
  return cudaLaunchKernel(ring ? ring_kernel_for(p.pre_kind) : kernel_for(p.x_dtype, p.pre_kind, p.three != 0),
                          dim3(unsigned(p.blocks)),
                          dim3(kSm90Threads), args, smem, stream);
}

}  // namespace cuda
}  // namespace fusedops
