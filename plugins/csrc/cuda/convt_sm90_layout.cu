// Which ConvTransposeGroupNormAct descriptors the sm_90a wgmma kernel takes, and its geometry and workspace layout
// (convt_wgmma.h). Host code; a pure function of the descriptor, so the workspace size is one too.
#include <stdint.h>

#include <algorithm>

#include "core/conv_rules.h"
#include "cuda/sm90/convt_wgmma.h"

namespace fusedops {
namespace cuda {

namespace {
constexpr size_t kAlign = 256;
size_t up(size_t v, size_t a) { return (v + a - 1) / a * a; }
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool refuse(ConvtSm90Layout* l, const char* why) {
  l->eligible = false;
  l->why = why;
  return false;
}

bool fill(const fusedops_op_desc& d, ConvtSm90Layout* l) {
  const fusedops_conv_desc& cv = d.conv;
  const fusedops_groupnorm_desc& gn = d.d.gn;
  const bool f32 = gn.x_dtype == FUSEDOPS_F32;
  if (!f32 && gn.x_dtype != FUSEDOPS_BF16 && gn.x_dtype != FUSEDOPS_F16)
    return refuse(l, "only float32, bfloat16 or float16 X");
  l->three = f32 && !d.d.allow_tf32;  // strict float32: 3xTF32 (hi and lo parts of X and W, three MMAs a tap)
  if (cv.spatial_rank < 1 || cv.spatial_rank > 2) return refuse(l, "1-D and 2-D convolutions only");
  if (cv.group != 1) return refuse(l, "one convolution group only");
  if (cv.channels_last) return refuse(l, "NCHW only");
  for (int i = 0; i < cv.spatial_rank; ++i)
    if (cv.strides[i] != 1) return refuse(l, "strides of 1 only");
  if (gn.C % kSm90Cout != 0) return refuse(l, "output channels a multiple of 64 only");
  const int chunk = f32 ? kSm90Chunk : 2 * kSm90Chunk;
  if (cv.in_channels % chunk != 0 || cv.in_channels == 0)
    return refuse(l, f32 ? "input channels a multiple of 8 only" : "16-bit X: input channels a multiple of 16 only");
  const int64_t cg = gn.C / gn.num_groups;
  if (!((kSm90Cout % cg == 0 && cg % 8 == 0) || cg % kSm90Cout == 0))
    return refuse(l, "GroupNorm groups of 8, 16, 32 or a multiple of 64 channels only");
  const core::ConvGeometry g = core::conv_geometry(cv);
  const int64_t wpad = g.wout + (g.kw - 1) * g.dw;
  const int64_t halo = (g.kh - 1) * g.dh * wpad + (g.kw - 1) * g.dw;
  const int64_t pixels = convt_sm90_tile_pixels(l->three);
  // A stage plane's slot count: at least the tile's pixels + halo; for 16-bit X one slot more than a multiple of 8,
  // so that the producers' 16-byte stores of the two channel groups (the fastest item index, item_coords in
  // convt_wgmma_producers.cuh) land on different banks.
  const int64_t span = int64_t(up(size_t(pixels + halo), 8)) + (f32 ? 0 : 1);
  const int64_t flat = g.hout * wpad;
  // 32-bit index arithmetic in the kernel; the descriptors' 14-bit strides bound a stage's slots.
  if (flat + span >= INT32_MAX || 8 * g.hin * g.win >= INT32_MAX || span >= 16384 || gn.N > 65535 ||
      g.kh * g.kw > 64)
    return refuse(l, "sizes beyond the kernel's 32-bit indices or stage");
  const int64_t offx = (g.kw - 1) * g.dw - g.pw;
  l->wpad = int32_t(wpad);
  l->offy = int32_t((g.kh - 1) * g.dh - g.ph);
  l->offx = int32_t(offx);
  l->span = int32_t(span);
  // The ring producer (TF32): 16-byte rows and slot groups (win, wpad % 4 == 0), no column that padding crops (two
  // items would share a raw slot), one channel tile (W's ring runs across tiles), a chunk in one producer pass.
  const int64_t rows_max = std::min<int64_t>(g.hin, (span - 1) / wpad + 2);
  if (f32 && !l->three && g.win % 4 == 0 && wpad % 4 == 0 && offx >= 0 && offx + g.win <= wpad &&
      gn.C == kSm90Cout && 2 * rows_max * (g.win / 4) <= kSm90RingItems)
    l->ring_chunk = convt_sm90_raw_chunk_bytes(int32_t(span));
  l->tiles = int32_t(cdiv(flat, pixels));
  l->tiles_c = int32_t(gn.C / kSm90Cout);
  if (int64_t(l->tiles) * l->tiles_c * gn.N >= INT32_MAX)  // the persistent blocks count tiles in 32 bits
    return refuse(l, "sizes beyond the kernel's 32-bit indices or stage");
  const int64_t groups = gn.N * gn.num_groups;
  l->partials_bytes = size_t(groups) * size_t(2 * l->tiles) * size_t(l->tiles_c) * sizeof(Welford);
  l->stats_offset = up(l->partials_bytes, kAlign);
  l->done_offset = up(l->stats_offset + size_t(groups) * sizeof(float2), kAlign);
  l->wp_offset = up(l->done_offset + size_t(gn.N) * sizeof(uint32_t), kAlign);
  l->total = kAlign + l->wp_offset +
             size_t(l->three ? 2 : 1) * size_t(cv.in_channels) * size_t(gn.C) * size_t(g.kh * g.kw) * sizeof(float);
  l->eligible = true;
  return true;
}
}  // namespace

ConvtSm90Layout convt_sm90_layout(const fusedops_op_desc& d) {
  ConvtSm90Layout l;
  fill(d, &l);
  return l;
}

}  // namespace cuda
}  // namespace fusedops
