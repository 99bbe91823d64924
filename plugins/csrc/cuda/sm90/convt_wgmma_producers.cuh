// Internal to convt_wgmma.cu: the producer warpgroups' staging of X (float32 and 16-bit) into the K-major stages.
#pragma once

#include "cuda/sm90/convt_wgmma.h"
#include "cuda/sm90/wgmma_ptx.cuh"

namespace fusedops {
namespace cuda {
namespace sm90 {

__host__ __device__ inline uint32_t stage_x_bytes(int32_t span) { return uint32_t(span) * 2u * 16u; }
__host__ __device__ inline uint32_t stage_w_bytes(int32_t taps) { return uint32_t(taps) * 2u * kSm90Cout * 16u; }

__device__ __forceinline__ float tf32(float x) {
  uint32_t t;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(t) : "f"(x));
  return __uint_as_float(t);
}

// A persistent block stages many tiles into the same stages, and which slots lie outside X (padding rows and
// columns, rows past the grid's end) depends on the tile: at a stage's first use in a tile the producer zeroes the
// tile's outside slots (a few edge columns a row; whole rows only at the image's top and bottom). The items write
// every other slot of the span, so together they cover the stage. Same byte geometry for float32 and 16-bit X.
// One flat loop over the outside slots of both planes, each thread taking slots tid, tid + kSm90Producers, ...: a
// loop over (plane, row) with an inner loop over the row's outside columns ran ~10 uniform iterations a chunk on every
// thread, a fifth of the 16-bit producer's stall samples (ncu, 2026-11-27), though only a few threads store there.
// On scalars (a reference to the kernel's parameters would be read through a generic pointer, from memory, each
// iteration). Inlined: a call inside a setmaxnreg region fails ptxas's register allocation (13.0, C7600). Host too:
// tools/convt_stage_check.cu checks it against the items' stores.
__host__ __device__ __forceinline__ void zero_outside(unsigned char* sx, int m0, int tid, int wpad, int span, int offx,
                                                      int offy, int win, int hin) {
  const int r_lo = m0 / wpad, rows = (m0 + span - 1) / wpad - r_lo + 1;
  const int a = min(max(offx, 0), wpad), b = min(max(offx + win, 0), wpad);  // X's padded columns [a, b)
  const int edge = a + (wpad - b);
  // The tile's rows r_lo + [0, top) lie above X, [top, top + mid) inside it (their edge columns are outside), the
  // rest below it.
  const int top = min(max(offy - r_lo, 0), rows), mid = min(max(offy + hin - r_lo, 0), rows) - top;
  const int top_n = top * wpad, mid_n = mid * edge, per_plane = top_n + mid_n + (rows - top - mid) * wpad;
  for (int i = tid; i < 2 * per_plane; i += kSm90Producers) {
    const int plane = i >= per_plane;
    int k = i - plane * per_plane, row, col;
    if (k < top_n) {
      row = k / wpad, col = k - row * wpad;
    } else if ((k -= top_n) < mid_n) {
      row = k / edge, col = k - row * edge;
      col = col < a ? col : b + (col - a);
      row += top;
    } else {
      k -= mid_n;
      row = k / wpad, col = k - row * wpad;
      row += top + mid;
    }
    const int slot = (r_lo + row) * wpad + col - m0;
    if (slot >= 0 && slot < span)
      *reinterpret_cast<float4*>(sx + (size_t(plane) * span + slot) * 16) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// The input rows the slots [m0, m0 + span) of a tile reach, and the items of a chunk there: (channel group of E, row,
// group of E columns), two channel groups a chunk. The same for every producer.
struct TileItems {
  int iy_lo, ngroups, items, rows_d;
};
template <int E>
__host__ __device__ __forceinline__ TileItems tile_items(const ConvtSm90Params& p, int m0) {
  const int iy_lo = max(0, m0 / p.wpad - p.offy);
  const int iy_hi = min(p.hin - 1, (m0 + p.span - 1) / p.wpad - p.offy);
  const int rows = max(0, iy_hi - iy_lo + 1), ngroups = (p.win + E - 1) / E;
  return {iy_lo, ngroups, 2 * rows * ngroups, max(rows, 1)};
}

// Item i's (channel group, input row, column group). Float32 X: column groups fastest, so a warp's 16-byte loads read
// one run of X. 16-bit X: channel groups fastest, then column groups: a quarter-warp's 16-byte stores then reach two
// bank groups (the channel groups lie one slot apart through span's residue, convt_sm90_layout.cu) where column groups
// fastest put all eight on one (a 16-bit item covers 8 slots, 128 bytes), and a warp's loads still read two runs of
// 256 bytes. Measured (H200, 2026-11-27): BF16 model 4 6 % faster; rows in the quarter-warp too (2-way conflicts)
// no faster; for float32 65 % fewer conflicts gained nothing at ncu's fixed clock, so it keeps its order.
template <int E>
__host__ __device__ __forceinline__ void item_coords(int i, int ngroups, int rows_d, int& chan, int& r, int& cgroup) {
  if constexpr (E == 8) {
    chan = i & 1, cgroup = (i >> 1) % ngroups, r = (i >> 1) / ngroups;
  } else {
    cgroup = i % ngroups, r = (i / ngroups) % rows_d, chan = i / (ngroups * rows_d);
  }
}

// The items of one pass for this thread, both producers: item j = base + kSm90Producers j + tid of the chunk's
// (channel group of E, input row, group of E columns); its offset in a chunk of X, the stage byte offset of its first
// slot, and masks (bit E j + e: column e inside X, to load; then the same for the slots to store). A column that
// padding crops (padded column outside [0, wpad)) is read by no output; storing it would land in the neighbouring
// padded row.
template <int E, int kItems>
__host__ __device__ __forceinline__ void item_table(const ConvtSm90Params& p, int base, int tid, int items,
                                                    int ngroups, int rows_d, int iy_lo, int m0, int64_t plane,
                                                    int (&isrc)[kItems], int (&idst)[kItems], uint32_t& lmask,
                                                    uint32_t& smask, int cstride = 0, int* islot = nullptr) {
  lmask = smask = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = base + j * kSm90Producers + tid;
    int chan, r, cgroup;
    item_coords<E>(i, ngroups, rows_d, chan, r, cgroup);
    const int s0 = (iy_lo + r + p.offy) * p.wpad + E * cgroup + p.offx - m0;
    isrc[j] = chan * E * int(plane) + (iy_lo + r) * p.win + E * cgroup;
    idst[j] = (chan * p.span + s0) * 16;
    if (islot) islot[j] = chan * E * cstride + s0;  // the item's first channel and slot, channels cstride apart
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int sl = s0 + e, col = E * cgroup + e, pcol = col + p.offx;
      if (i < items && col < p.win) lmask |= 1u << (E * j + e);
      if (i < items && sl >= 0 && sl < p.span && col < p.win && pcol >= 0 && pcol < p.wpad) smask |= 1u << (E * j + e);
    }
  }
}

constexpr int kItemsPerPass = 3;  // producer items in flight per thread: 3 x 16 floats of registers
static_assert(kItemsPerPass * kSm90Producers == kSm90RingItems, "the ring producer takes a chunk in one pass");

// The producer warpgroups: per channel chunk, every input row the tile's staged slots reach, in items of 4 channels x
// 4 consecutive input columns: 16-byte loads (V4: float32 rows of width % 4 == 0 on 16-byte aligned X) issued before
// the stage is known to be free, then rounded to TF32, transposed in registers and stored as 4 slots of 16 bytes
// ([channel quad][slot][4 channels]). Slots outside X: zero_outside. g0: the block's chunk count before this tile.
// kThree (strict float32, 3xTF32): the stage holds X's TF32 hi part, then its lo part tf32(x - hi), then the packed
// W's hi and lo blocks (one bulk copy).
template <bool V4, bool kThree>
__device__ __forceinline__ void produce(const ConvtSm90Params& p, unsigned char* stages, uint64_t* full,
                                        uint64_t* empty, int m0, int n, int ct, int g0) {
  constexpr uint32_t kParts = kThree ? 2 : 1;
  const int tid = threadIdx.x;
  const int taps = p.kh * p.kw;
  const uint32_t x_bytes = stage_x_bytes(p.span), w_bytes = kParts * stage_w_bytes(taps);
  const uint32_t stage_bytes = kParts * x_bytes + w_bytes;
  const int64_t plane = int64_t(p.hin) * p.win;
  const float* xn = static_cast<const float*>(p.x) + int64_t(n) * p.cin * plane;
  const float* wt = static_cast<const float*>(p.wp) + int64_t(ct) * p.chunks * (w_bytes / 4);
  const TileItems ti = tile_items<4>(p, m0);  // items: (channel quad, row, column quad)
  // Per item of a pass: its offset in a chunk of X, the stage byte offset of its first slot, and masks (bit 4 j + e:
  // column e inside X, to load; then the same for the slots to store). The same for every chunk: with one pass a
  // chunk (items <= kItemsPerPass * kSm90Producers, model 4's tiles) they are computed once a tile, not once a chunk.
  int isrc[kItemsPerPass], idst[kItemsPerPass];  // (the plan keeps 8 channel planes within int32)
  uint32_t lmask = 0, smask = 0;
  const bool one_pass = ti.items <= kItemsPerPass * kSm90Producers;
  for (int q = 0; q < p.chunks; ++q) {
    const int g = g0 + q, st = g % p.stages;  // g: the block's chunk count over its tiles
    unsigned char* sx = stages + size_t(st) * stage_bytes;
    const float* xc = xn + int64_t(q) * kSm90Chunk * plane;
    for (int base = 0; base < ti.items || base == 0; base += kItemsPerPass * kSm90Producers) {
      if (!one_pass || q == 0)
        item_table<4, kItemsPerPass>(p, base, tid, ti.items, ti.ngroups, ti.rows_d, ti.iy_lo, m0, plane, isrc, idst,
                                     lmask, smask);
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
      // The loads are in flight: wait for the stage and, at its first chunk of a tile, zero its outside slots (so the
      // load latency overlaps the wait; before the flat zero_outside this order spilled, and the loads waited for it).
      if (base == 0) {
        if (g >= p.stages) mbar_wait(empty + st, uint32_t((g / p.stages - 1) & 1));
        if (q < p.stages)
          for (uint32_t part = 0; part < kParts; ++part)
            zero_outside(sx + part * x_bytes, m0, tid, p.wpad, p.span, p.offx, p.offy, p.win, p.hin);
        if (tid == 0) {
          mbar_arrive_expect_tx(full + st, w_bytes);
          bulk_copy(sx + kParts * x_bytes, wt + int64_t(q) * (w_bytes / 4), w_bytes, full + st);
        }
      }
#pragma unroll
      for (int j = 0; j < kItemsPerPass; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (smask >> (4 * j + e) & 1) {
            const float4 hi = make_float4(tf32(v[j][0][e]), tf32(v[j][1][e]), tf32(v[j][2][e]), tf32(v[j][3][e]));
            *reinterpret_cast<float4*>(sx + idst[j] + 16 * e) = hi;
            if constexpr (kThree)
              *reinterpret_cast<float4*>(sx + x_bytes + idst[j] + 16 * e) =
                  make_float4(tf32(v[j][0][e] - hi.x), tf32(v[j][1][e] - hi.y), tf32(v[j][2][e] - hi.z),
                              tf32(v[j][3][e] - hi.w));
          }
    }
    fence_proxy_async();
    mbar_arrive(full + st);
  }
}

// The ring producer (plan option convt_ring_producer; float32 TF32, 16-byte rows, a chunk in one pass, one channel
// tile). The register producer issues a chunk's loads only after storing the previous chunk, so its period is at least
// the load latency plus its stores. Here each thread cp.asyncs its items' 4 channel rows of 4 columns kXAhead chunks
// ahead into a raw ring laid out on the stage's slots, then, once its own copies of chunk q have landed, reads them
// back, rounds, transposes and stores them as produce does; no load holds a register. W does not come with the stage
// (two stages fit beside the rings, and W's copy would wait for a free stage): it has its own ring of kWRing chunks,
// kWAhead ahead, issued by thread 0 with its own barriers. Stage geometry, items and masks are produce's.
constexpr int kWRing = 3, kWAhead = 2, kXRing = 3, kXAhead = 2;
constexpr int kRawMargin = 4;  // slots before a raw channel row: an item may start up to 3 slots before slot 0

// Raw ring chunk (convt_sm90_raw_chunk_bytes): [8 channels][span + 16 slots] floats; slot s of channel c at
// c * (span + 16) + s + kRawMargin + shift, where shift (0-3, from offx) puts every item's first slot on 16 bytes
// (wpad % 4 == 0, m0 % 4 == 0). Items never share a raw slot: the plan takes no shape whose padding crops columns.

// W of the block's chunk h (the same for every tile: one channel tile) into W ring slot h % kWRing, once the
// consumers have released the slot's previous chunk h - kWRing.
__device__ __forceinline__ void issue_w(const ConvtSm90Params& p, unsigned char* wring, uint64_t* wfull,
                                        uint64_t* wempty, int h) {
  const uint32_t w_bytes = stage_w_bytes(p.kh * p.kw);
  const int slot = h % kWRing;
  if (h >= kWRing) mbar_wait(wempty + slot, uint32_t((h / kWRing - 1) & 1));
  mbar_arrive_expect_tx(wfull + slot, w_bytes);
  bulk_copy(wring + size_t(slot) * w_bytes,
            static_cast<const unsigned char*>(p.wp) + size_t(h % p.chunks) * w_bytes, w_bytes, wfull + slot);
}

__device__ __forceinline__ void produce_ring(const ConvtSm90Params& p, unsigned char* stages, unsigned char* wring,
                                             float* ring, uint64_t* full, uint64_t* empty, uint64_t* wfull,
                                             uint64_t* wempty, int m0, int n, int g0, int g_end) {
  const int tid = threadIdx.x;
  const uint32_t x_bytes = stage_x_bytes(p.span);  // a stage holds X only
  const int64_t plane = int64_t(p.hin) * p.win;
  const float* xn = static_cast<const float*>(p.x) + int64_t(n) * p.cin * plane;
  const TileItems ti = tile_items<4>(p, m0);  // (win % 4 == 0: every column group is 4 columns of X)
  const int crow = p.span + 16;                      // floats between two channels of a raw chunk
  const int chunk_floats = kSm90Chunk * crow;
  const int shift = kRawMargin + ((4 - (p.offx & 3)) & 3);
  int isrc[kItemsPerPass], idst[kItemsPerPass], iraw[kItemsPerPass];
  uint32_t lmask = 0, smask = 0;
  item_table<4, kItemsPerPass>(p, 0, tid, ti.items, ti.ngroups, ti.rows_d, ti.iy_lo, m0, plane, isrc, idst, lmask,
                                smask, crow, iraw);
#pragma unroll
  for (int j = 0; j < kItemsPerPass; ++j) iraw[j] += shift;  // the raw offset of the item's first channel and slot
  auto issue = [&](int q) {  // chunk q's copies into raw slot q % kXRing, one commit group (empty past the end)
    if (q < p.chunks) {
      const float* xc = xn + int64_t(q) * kSm90Chunk * plane;
      float* raw = ring + (q % kXRing) * chunk_floats;
#pragma unroll
      for (int j = 0; j < kItemsPerPass; ++j)
        if (smask >> (4 * j) & 15u)  // an item with a slot in the stage (its 4 columns all inside X: win % 4 == 0)
#pragma unroll
          for (int c = 0; c < 4; ++c) cp_async16(raw + iraw[j] + c * crow, xc + isrc[j] + c * plane);
    }
    cp_async_commit();
  };
  named_sync(5, kSm90Producers);  // every producer thread has read the previous tile's chunks out of the ring
  for (int q = 0; q < kXAhead; ++q) issue(q);
  for (int q = 0; q < p.chunks; ++q) {
    const int g = g0 + q, st = g % p.stages;
    unsigned char* sx = stages + size_t(st) * x_bytes;
    issue(q + kXAhead);
    cp_async_wait<kXAhead>();  // this thread's copies of chunk q have landed
    if (g >= p.stages) mbar_wait(empty + st, uint32_t((g / p.stages - 1) & 1));
    if (q < p.stages) zero_outside(sx, m0, tid, p.wpad, p.span, p.offx, p.offy, p.win, p.hin);
    const float* raw = ring + (q % kXRing) * chunk_floats;
#pragma unroll
    for (int j = 0; j < kItemsPerPass; ++j) {
      if (!(smask >> (4 * j) & 15u)) continue;
      float4 v[4];  // [channel] of 4 columns
#pragma unroll
      for (int c = 0; c < 4; ++c) v[c] = *reinterpret_cast<const float4*>(raw + iraw[j] + c * crow);
      const float* f0 = &v[0].x;
      const float* f1 = &v[1].x;
      const float* f2 = &v[2].x;
      const float* f3 = &v[3].x;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (smask >> (4 * j + e) & 1)
          *reinterpret_cast<float4*>(sx + idst[j] + 16 * e) = make_float4(tf32(f0[e]), tf32(f1[e]), tf32(f2[e]),
                                                                          tf32(f3[e]));
    }
    fence_proxy_async();
    mbar_arrive(full + st);
    // W of chunk g + kWAhead, only now: its slot frees when the consumers retire chunk g - 1, which they start once
    // this chunk is staged (waiting before the arrival above would deadlock).
    if (tid == 0 && g + kWAhead < g_end) issue_w(p, wring, wfull, wempty, g + kWAhead);
  }
}

// 16-bit X: items of 8 channels (one K core of k16) x 8 consecutive input columns: 16-byte loads (V8: rows of width
// % 8 == 0 on 16-byte aligned X) of each channel's 8 columns, transposed in registers with byte permutes into 8 slots
// of 8 channels (16 bytes each, [channel octet][slot][8 channels]); the stage geometry in bytes is the float32 one.
constexpr int kItems16 = 2;  // 2 x 32 registers of loaded words

template <typename T, bool V8>
__device__ __forceinline__ void produce16(const ConvtSm90Params& p, unsigned char* stages, uint64_t* full,
                                          uint64_t* empty, int m0, int n, int ct, int g0) {
  const int tid = threadIdx.x;
  const int taps = p.kh * p.kw;
  const uint32_t x_bytes = stage_x_bytes(p.span), w_bytes = stage_w_bytes(taps), stage_bytes = x_bytes + w_bytes;
  const int64_t plane = int64_t(p.hin) * p.win;
  const T* xn = static_cast<const T*>(p.x) + int64_t(n) * p.cin * plane;
  const unsigned char* wt = static_cast<const unsigned char*>(p.wp) + size_t(ct) * p.chunks * w_bytes;
  const TileItems ti = tile_items<8>(p, m0);
  const bool one_pass = ti.items <= kItems16 * kSm90Producers;
  int isrc[kItems16], idst[kItems16];
  uint32_t lmask = 0, smask = 0;  // bit 8 j + e: column e of item j inside X / its slot stored
  for (int q = 0; q < p.chunks; ++q) {
    const int g = g0 + q, st = g % p.stages;  // g: the block's chunk count over its tiles
    unsigned char* sx = stages + size_t(st) * stage_bytes;
    const T* xc = xn + int64_t(q) * 16 * plane;
    for (int base = 0; base < ti.items || base == 0; base += kItems16 * kSm90Producers) {
      if (!one_pass || q == 0)
        item_table<8, kItems16>(p, base, tid, ti.items, ti.ngroups, ti.rows_d, ti.iy_lo, m0, plane, isrc, idst, lmask,
                                smask);
      uint32_t w[kItems16][8][4];  // [item][channel][column pair]
#pragma unroll
      for (int j = 0; j < kItems16; ++j) {
        const T* src = xc + isrc[j];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          if (V8) {
            uint4 t = make_uint4(0u, 0u, 0u, 0u);
            if (lmask >> (8 * j) & 255u) t = __ldg(reinterpret_cast<const uint4*>(src + c * plane));
            w[j][c][0] = t.x, w[j][c][1] = t.y, w[j][c][2] = t.z, w[j][c][3] = t.w;
          } else {
            const unsigned short* s16 = reinterpret_cast<const unsigned short*>(src + c * plane);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const uint32_t lo = lmask >> (8 * j + 2 * k) & 1 ? __ldg(s16 + 2 * k) : 0u;
              const uint32_t hi = lmask >> (8 * j + 2 * k + 1) & 1 ? __ldg(s16 + 2 * k + 1) : 0u;
              w[j][c][k] = lo | hi << 16;
            }
          }
        }
      }
      if (base == 0) {  // (see produce)
        if (g >= p.stages) mbar_wait(empty + st, uint32_t((g / p.stages - 1) & 1));
        if (q < p.stages) zero_outside(sx, m0, tid, p.wpad, p.span, p.offx, p.offy, p.win, p.hin);
        if (tid == 0) {
          mbar_arrive_expect_tx(full + st, w_bytes);
          bulk_copy(sx + x_bytes, wt + size_t(q) * w_bytes, w_bytes, full + st);
        }
      }
#pragma unroll
      for (int j = 0; j < kItems16; ++j)
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (smask >> (8 * j + e) & 1) {
            // column e of channels 0-7: the low (e even) or high (e odd) halves of word e / 2, two channels a word
            const uint32_t sel = e & 1 ? 0x7632u : 0x5410u;
            const int k = e >> 1;
            *reinterpret_cast<uint4*>(sx + idst[j] + 16 * e) =
                make_uint4(__byte_perm(w[j][0][k], w[j][1][k], sel), __byte_perm(w[j][2][k], w[j][3][k], sel),
                           __byte_perm(w[j][4][k], w[j][5][k], sel), __byte_perm(w[j][6][k], w[j][7][k], sel));
          }
    }
    fence_proxy_async();
    mbar_arrive(full + st);
  }
}

}  // namespace sm90
}  // namespace cuda
}  // namespace fusedops
