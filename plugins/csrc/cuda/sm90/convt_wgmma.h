// Internal: the sm_90a convolution kernel of ConvTransposeGroupNormAct (convt_wgmma.cu), what convt_gn.cu needs.
// Built for sm_90a only (wgmma); without it the entries below answer cudaErrorNotSupported and convt_sm90_built() 0.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/device_common.cuh"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace cuda {

// Tile of one block: 64 output channels x kSm90Pixels consecutive pixels of the padded output grid (two consumer
// warpgroups of 256), K in chunks of 8 (float32) or 16 (16-bit) input channels x every tap.
constexpr int kSm90Pixels = 512;
// Strict float32 (3xTF32) takes tiles of 256 pixels (128 a consumer warpgroup): each thread then holds, beside the
// tile's running sums (64 registers), fresh accumulators (64) for one kernel row's products, added into the sums
// with IEEE adds. Accumulating every product in place (216 MMAs an output at model 4) left 2-10 x eager FP32's error:
// the tensor cores' accumulation rounds toward zero (tools/split_3xtf32_check.py emulates both).
constexpr int kSm90Pixels3x = 256;
constexpr __host__ __device__ int convt_sm90_tile_pixels(bool three) { return three ? kSm90Pixels3x : kSm90Pixels; }
constexpr int kSm90Cout = 64;
constexpr int kSm90Chunk = 8;  // float32; 16-bit X: 2 * kSm90Chunk (one k16 MMA a tap)
// Two producer warpgroups, two consumer warpgroups. One producer warp an SM sub-partition issued on ~13 % of its
// cycles and left the consumers waiting for full stages ~40 % of theirs (ncu, 2026-11-27): two halve each producer
// thread's items. Registers: 128 a thread at launch; producers give 32 back (setmaxnreg), consumers take 160. Against
// 88 / 168, 96 / 160 ran model 4 (batch 128, H200, 2026-11-27) in BF16 10.7 % faster (the 16-bit producer's spills),
// FP32-accurate 2.4 %, TF32 0.8 %.
constexpr int kSm90Producers = 256;
constexpr int kSm90Threads = kSm90Producers + 256;
constexpr int kSm90ProducerRegs = 96, kSm90ConsumerRegs = 160;
static_assert(kSm90Producers * kSm90ProducerRegs + 256 * kSm90ConsumerRegs <= 65536, "the SM's register file");
constexpr int kSm90RingItems = 768;  // the ring producer's items a chunk (4 channels x 4 columns each), one pass

// The padded grid: output pixel (oy, ox) is flat index oy * wpad + ox, and tap (kh, kw) reads the staged input at
// flat index m + shift(kh, kw), shift = (kh_max - kh) * dh * wpad + (kw_max - kw) * dw, where padded input row R is
// input row R - offy and padded column S input column S - offx (zeros outside X). One uniform shift per tap is what
// lets a tap's B operand be the stage at an offset.
struct ConvtSm90Params {
  const void* x;        // NCHW, x_dtype
  const void* wp;       // packed weights: [channel tile][chunk][tap][2][64][16 bytes of x_dtype], float32 TF32-rounded
  const void* bias;     // may be null
  ExtraPtrs ex;
  fusedops_chain pre;
  int32_t param_dtype;
  void* y;              // NCHW, x_dtype: the pre-normalisation value (bias + pre)
  Welford* partials;    // [N][G][2 * tiles][channel tiles]
  int32_t batch, cin, cout, hin, win, hout, wout;
  int32_t kh, kw, dh, dw;
  int32_t wpad, offy, offx;  // padded grid width; input row / column = padded row / column - offy / offx
  int32_t span;              // staged slots a stage plane holds (float32: a multiple of 8; 16-bit: 8 k + 1)
  int32_t chunks, stages;    // input-channel chunks (cin / 8 float32, cin / 16 16-bit); pipeline depth
  int32_t tiles;             // pixel tiles of convt_sm90_tile_pixels(three) a sample
  int32_t G, Cg, tiles_c;
  int32_t x_dtype;           // FUSEDOPS_F32 (TF32 products), FUSEDOPS_BF16 or FUSEDOPS_F16
  int32_t x_vec;             // X rows start 16-byte aligned (win a multiple of 16 bytes, X aligned): 16-byte loads
  int32_t pre_kind;          // convt_sm90_pre_kind(pre), or -1 where Y's shape needs the shared-memory epilogue
  int32_t blocks;            // persistent grid: one block an SM (its registers hold one), at most the tiles
  int32_t three;             // float32 X, strict: 3xTF32 (stages and packed W hold hi and lo parts)
  int32_t ring;              // > 0: float32 TF32 X through the raw ring and W through its own (kRing kernels)
  // Non-null (plan option convt_normalisers): every partial written is counted in done[n] after its tile's Y, and
  // the kernel lets the next launch in the stream start at once: the normaliser kernel (convt_normaliser.cuh),
  // which runs on the SMs this grid leaves free and normalises each sample once all its partials are counted.
  uint32_t* done;  // [N], zeroed before the launch
};

// Bytes of one raw ring chunk: [8 channels][span + 16 slots] floats (convt_wgmma_producers.cuh, produce_ring).
inline __host__ __device__ size_t convt_sm90_raw_chunk_bytes(int32_t span) {
  return size_t(kSm90Chunk) * size_t(span + 16) * sizeof(float);
}

// Where the kernel can run `d` (convt_sm90_layout.cpp): its geometry and workspace layout, or eligible = false and
// `why` the first reason it cannot (the plan then runs the mma.sync kernel of convt_gn.cu).
struct ConvtSm90Layout {
  bool eligible = false;
  bool three = false;  // strict float32: 3xTF32
  const char* why = "";
  int32_t wpad = 0, offy = 0, offx = 0, span = 0, tiles = 0, tiles_c = 0;
  size_t ring_chunk = 0;  // > 0: TF32 X may stage through the ring producer; bytes of one raw chunk
  size_t partials_bytes = 0, stats_offset = 0, done_offset = 0, wp_offset = 0, total = 0;
};
ConvtSm90Layout convt_sm90_layout(const fusedops_op_desc& d);

// 1 if this build has the sm_90a kernel.
int convt_sm90_built();
// Dynamic shared memory of a launch with these parameters (stages included), or 0 if they cannot fit `limit`;
// picks the pipeline depth into *stages and, where ring_chunk (bytes of a raw chunk) > 0 and a ring fits, its slots
// into *ring (else 0).
size_t convt_sm90_smem(int32_t span, int32_t taps, bool three, size_t ring_chunk, size_t limit, int32_t* stages,
                       int32_t* ring);
// Weights [cin][cout][kh][kw] of x_dtype into p.wp's packed layout (float32 TF32-rounded; `three`: a chunk's hi
// block, then its lo block).
cudaError_t convt_sm90_pack(const void* w, void* wp, int32_t x_dtype, int32_t cin, int32_t cout, int32_t taps,
                            bool three, cudaStream_t stream);
// The convolution + bias + pre + partial statistics: p.blocks persistent blocks over the tiles x tiles_c x N.
cudaError_t convt_sm90_conv(const ConvtSm90Params& p, size_t smem, cudaStream_t stream);
// 0: `pre` is empty, 1: GELU alone (both take the register epilogue), -1: any other chain (shared-memory epilogue).
int32_t convt_sm90_pre_kind(const fusedops_chain& pre);
// Sets the kernels' dynamic shared-memory cap (plan creation; the device's opt-in limit, shared by every plan).
cudaError_t convt_sm90_prepare(size_t smem);

}  // namespace cuda
}  // namespace fusedops
