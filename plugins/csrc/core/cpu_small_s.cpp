// CPU GroupNormAct for small spatial sizes (S < kSmallS = 32; S = 1 is every (N, C) input, e.g. a GEMM's rows):
// vectorised across channels.
//
// The general path (cpu_kernels.cpp) cuts each channel into min(1024, S)-element pieces, i.e. one element at a time
// when S = 1 (4-10x slower than ORT's unfused graph on (N, C) inputs). Here a task takes a span of whole groups of
// one sample (contiguous in memory), runs each chain step over the whole span with per-element parameters (the
// per-channel vectors expanded to C*S elements once per call; for S = 1 they are the vectors themselves), and
// normalises group by group; statistics as everywhere: exact block moments merged in double.
#include "core/cpu_small_s.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fusedops {
namespace cpu {

namespace {

constexpr int64_t kSmallExpandMax = 1LL << 22;  // floats of expanded parameters at most (16 MiB)
constexpr int64_t kSmallTaskElems = 8192;       // elements per task (a few L1-sized blocks)

// Per-element copies of gamma, beta and the extras (element i of a sample has channel i / S).
struct ElementParams {
  std::vector<float> storage;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  const float* ex[FUSEDOPS_MAX_EXTRAS] = {};

  ElementParams(const ChannelParams& p, int64_t C, int64_t S) {
    const int64_t n_ex = static_cast<int64_t>(p.extras.size());
    if (S == 1) {
      gamma = p.gamma.data();
      beta = p.beta.data();
      for (int64_t k = 0; k < n_ex; ++k) ex[k] = p.ex[k];
      return;
    }
    storage.resize(static_cast<size_t>((2 + n_ex) * C * S));
    auto expand = [&](const float* src, int64_t slot) {
      float* dst = storage.data() + slot * C * S;
      for (int64_t c = 0; c < C; ++c) std::fill_n(dst + c * S, S, src[c]);
      return static_cast<const float*>(dst);
    };
    gamma = expand(p.gamma.data(), 0);
    beta = expand(p.beta.data(), 1);
    for (int64_t k = 0; k < n_ex; ++k) ex[k] = expand(p.ex[k], 2 + k);
  }
};

// pre, GroupNorm of each whole group, post on v[0..n): the groups [g0, g0 + n / glen) of one sample, whose first
// element has flat channel-position index `off` within the sample.
void small_s_span(const fusedops_groupnorm_desc& d, const ElementParams& e, float* v, int64_t n, int64_t off) {
  const int64_t glen = (d.C / d.num_groups) * d.S;
  apply_chain(d.pre, v, n, e.ex, off, true);
  for (int64_t o = 0; o < n; o += glen) {
    Moments m;
    for (int64_t b = 0; b < glen; b += kMomentBlock) m.merge_block(v + o + b, std::min(kMomentBlock, glen - b));
    const float mean = static_cast<float>(m.mean);
    const float rstd = static_cast<float>(1.0 / std::sqrt(m.variance() + static_cast<double>(d.epsilon)));
    float* w = v + o;
    const float* gm = e.gamma + off + o;
    const float* bt = e.beta + off + o;
    for (int64_t i = 0; i < glen; ++i) w[i] = (w[i] - mean) * (rstd * gm[i]) + bt[i];
  }
  apply_chain(d.post, v, n, e.ex, off, true);
}

// Reduce v (one sample after post: C channels x S positions) over the channels into out[0..S).
void small_s_reduce(const fusedops_groupnorm_desc& d, const float* v, float* out) {
  const int64_t C = d.C, S = d.S;
  if (S == 1) {
    ReduceAcc acc;
    reduce_init(d.reduce, &acc, 1);
    reduce_span(d.reduce, acc, v, C);
    out[0] = reduce_final(d.reduce, acc, C);
    return;
  }
  ReduceAcc acc[kSmallS];
  reduce_init(d.reduce, acc, S);
  for (int64_t c = 0; c < C; ++c) reduce_update(d.reduce, acc, v + c * S, S);
  for (int64_t s = 0; s < S; ++s) out[s] = reduce_final(d.reduce, acc[s], C);
}

}  // namespace

bool use_small_s_path(const fusedops_groupnorm_desc& d, int32_t n_extras) {
  return d.S < kSmallS && (d.S == 1 || (2 + n_extras) * d.C * d.S <= kSmallExpandMax);
}

void groupnorm_small_s(const fusedops_groupnorm_desc& d, const void* x, const ChannelParams& p, void* y) {
  const int64_t N = d.N, C = d.C, S = d.S, G = d.num_groups, glen = (C / G) * S, row = C * S;
  const ElementParams e(p, C, S);
  const int64_t T = num_threads();
  if (d.reduce != FUSEDOPS_REDUCE_NONE) {  // the reduction needs whole samples: a task is a block of samples
    const int64_t rows_per_task = std::max<int64_t>(1, std::min(kSmallTaskElems / row, N / (4 * T)));
    parallel_for((N + rows_per_task - 1) / rows_per_task, N * row, [&](int64_t t) {
      thread_local std::vector<float> buf;
      if (static_cast<int64_t>(buf.size()) < row) buf.resize(row);
      float out[kSmallS];
      for (int64_t n = t * rows_per_task; n < std::min(N, (t + 1) * rows_per_task); ++n) {
        load_f32(x, d.x_dtype, n * row, row, buf.data());
        small_s_span(d, e, buf.data(), row, 0);
        small_s_reduce(d, buf.data(), out);
        store_from_f32(out, S, y, d.x_dtype, n * S);
      }
    });
    return;
  }
  // Without a reduction a task is a span of whole groups; short samples are batched several to a task.
  const int64_t groups_per_task = std::max<int64_t>(1, std::min(G, kSmallTaskElems / glen));
  const int64_t spans = (G + groups_per_task - 1) / groups_per_task;
  const int64_t rows_per_task = spans > 1 ? 1 : std::max<int64_t>(1, std::min(kSmallTaskElems / row,
                                                                               N / (4 * T)));
  const int64_t tasks = spans > 1 ? N * spans : (N + rows_per_task - 1) / rows_per_task;
  parallel_for(tasks, N * row, [&](int64_t t) {
    thread_local std::vector<float> buf;
    const int64_t cap = std::max(groups_per_task * glen, row);
    if (static_cast<int64_t>(buf.size()) < cap) buf.resize(cap);
    if (spans > 1) {
      const int64_t n = t / spans, g0 = (t % spans) * groups_per_task;
      const int64_t off = g0 * glen, len = std::min(G - g0, groups_per_task) * glen;
      load_f32(x, d.x_dtype, n * row + off, len, buf.data());
      small_s_span(d, e, buf.data(), len, off);
      store_from_f32(buf.data(), len, y, d.x_dtype, n * row + off);
      return;
    }
    for (int64_t n = t * rows_per_task; n < std::min(N, (t + 1) * rows_per_task); ++n) {
      load_f32(x, d.x_dtype, n * row, row, buf.data());
      small_s_span(d, e, buf.data(), row, 0);
      store_from_f32(buf.data(), row, y, d.x_dtype, n * row);
    }
  });
}

}  // namespace cpu
}  // namespace fusedops
