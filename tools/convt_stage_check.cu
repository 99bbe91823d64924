// The ConvTranspose wgmma kernel's producer item table (plugins/csrc/cuda/sm90/convt_wgmma_producers.cuh), checked on
// the host without a GPU, at model 4's geometry and a few odd ones, for float32 and 16-bit X:
//  - coverage: in every tile, each stage slot whose padded (row, column) lies inside X is stored exactly once per
//    channel group, and no other slot; zero_outside (all producer threads) zeroes every other slot and none of those;
//  - shared-memory banks: the 16-byte stores of each quarter-warp (one wavefront when the eight land on eight
//    different 16-byte bank groups), as the average and largest number on one bank group. With column groups first,
//    16-bit X put all eight on one (the BF16 kernel ran 6 % slower on the H200, 2026-11-27).
//   nvcc -std=c++17 -arch=sm_90a -Iplugins/include -Iplugins/csrc tools/convt_stage_check.cu
//        plugins/csrc/cuda/convt_sm90_layout.cu -o convt_stage_check && ./convt_stage_check
// Prints one line a case; exit status 1 when a coverage check fails. tests/test_convt_stage_check.py runs it.
#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "core/conv_rules.h"
#include "cuda/sm90/convt_wgmma_producers.cuh"

using namespace fusedops::cuda;
using namespace fusedops::cuda::sm90;

namespace {

struct Case {
  const char* name;
  int cin, cout, hin, win, k, pad;
};

fusedops_op_desc describe(const Case& c, int32_t x_dtype) {
  fusedops_op_desc d{};
  d.op = FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT;
  // stride 1, no output padding, dilation 1
  const int64_t hout = fusedops::core::convtranspose_output_size(c.hin, c.k, 1, c.pad, c.pad, 0, 1);
  const int64_t wout = fusedops::core::convtranspose_output_size(c.win, c.k, 1, c.pad, c.pad, 0, 1);
  d.d.gn.N = 2, d.d.gn.C = c.cout, d.d.gn.S = hout * wout, d.d.gn.num_groups = c.cout / 8;
  d.d.gn.epsilon = 1e-5f, d.d.gn.x_dtype = x_dtype, d.d.gn.param_dtype = x_dtype;
  d.d.allow_tf32 = 1;
  fusedops_conv_desc& v = d.conv;
  v.spatial_rank = 2, v.group = 1, v.in_channels = c.cin;
  v.input[0] = c.hin, v.input[1] = c.win, v.output[0] = hout, v.output[1] = wout;
  for (int i = 0; i < 2; ++i)
    v.kernel[i] = c.k, v.strides[i] = 1, v.pads_begin[i] = v.pads_end[i] = c.pad, v.dilations[i] = 1;
  return d;
}

// Returns false on a coverage failure.
template <int E, int kItems>
bool check(const Case& c, const char* type, int32_t x_dtype) {
  const fusedops_op_desc d = describe(c, x_dtype);
  const ConvtSm90Layout l = convt_sm90_layout(d);
  if (!l.eligible) {
    std::printf("%s %s: not eligible (%s)\n", c.name, type, l.why);
    return false;
  }
  ConvtSm90Params p{};
  p.hin = c.hin, p.win = c.win, p.wpad = l.wpad, p.offy = l.offy, p.offx = l.offx, p.span = l.span;
  const int64_t plane = int64_t(c.hin) * c.win;
  const int pixels = convt_sm90_tile_pixels(false);
  long stores = 0, on_one = 0;
  int worst = 0;
  bool covered = true;
  for (int t = 0; t < l.tiles; ++t) {
    const int m0 = t * pixels;
    const TileItems ti = tile_items<E>(p, m0);
    std::vector<int> count(2 * size_t(p.span), 0);
    // zero_outside over a poisoned stage: which slots it zeroed
    std::vector<float> stage(2 * size_t(p.span) * 4, -1.f);
    for (int tid = 0; tid < kSm90Producers; ++tid)
      zero_outside(reinterpret_cast<unsigned char*>(stage.data()), m0, tid, p.wpad, p.span, p.offx, p.offy, p.win,
                   p.hin);
    for (int base = 0; base < ti.items || base == 0; base += kItems * kSm90Producers) {
      // bank groups of every store instruction: (j, e, warp, quarter) -> the 16-byte groups of its active threads
      std::map<std::vector<int>, std::vector<int>> groups;
      for (int tid = 0; tid < kSm90Producers; ++tid) {
        int isrc[kItems], idst[kItems];
        uint32_t lmask = 0, smask = 0;
        item_table<E, kItems>(p, base, tid, ti.items, ti.ngroups, ti.rows_d, ti.iy_lo, m0, plane, isrc, idst, lmask,
                              smask);
        for (int j = 0; j < kItems; ++j)
          for (int e = 0; e < E; ++e)
            if (smask >> (E * j + e) & 1u) {
              const int slot = idst[j] / 16 + e;  // [channel group][span slots]
              if (slot < 0 || slot >= 2 * p.span) {
                covered = false;
                continue;
              }
              ++count[size_t(slot)];
              groups[{j, e, tid / 32, (tid % 32) / 8}].push_back(slot % 8);
            }
      }
      for (const auto& g : groups) {
        int n[8] = {};
        for (int b : g.second) ++n[b];
        const int most = *std::max_element(n, n + 8);
        ++stores, on_one += most, worst = std::max(worst, most);
      }
    }
    for (int s = 0; s < 2 * p.span; ++s) {
      const int flat = m0 + s % p.span, row = flat / p.wpad - p.offy, col = flat % p.wpad - p.offx;
      const int want = row >= 0 && row < c.hin && col >= 0 && col < c.win ? 1 : 0;
      const bool zeroed = stage[4 * size_t(s)] == 0.f;
      if (count[size_t(s)] != want || zeroed == bool(want)) covered = false;
    }
  }
  std::printf("%s %s: %d tiles, coverage %s, quarter-warp stores on one bank group: average %.2f, most %d\n", c.name,
              type, l.tiles, covered ? "ok" : "BAD", stores ? double(on_one) / double(stores) : 0.0, worst);
  return covered;
}

}  // namespace

int main() {
  const Case cases[] = {
      {"model4", 64, 64, 256, 256, 3, 0},   {"k5_pad2_win33", 32, 64, 20, 33, 5, 2},
      {"k2_win100", 16, 64, 9, 100, 2, 0},  {"k1_win64", 16, 128, 12, 64, 1, 0},
      {"k3_pad1_win7", 48, 64, 11, 7, 3, 1},
  };
  bool ok = true;
  for (const Case& c : cases) {
    ok = check<4, kItemsPerPass>(c, "float32", FUSEDOPS_F32) && ok;
    ok = check<8, kItems16>(c, "bfloat16", FUSEDOPS_BF16) && ok;
  }
  return ok ? 0 : 1;
}
