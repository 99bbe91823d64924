// CPU entries: fusedops_groupnorm_act_cpu and fusedops_gemm_groupnorm_act_cpu (float32 / float16 / bfloat16 storage,
// float32 math, float32 statistics merged in double).
//
// GroupNormAct: small spatial sizes (S < 32, S = 1 for every (N, C) input) take cpu_small_s.cpp's path; otherwise
// one task per (sample, group) — a group is one contiguous span of (C/G)·S elements. Pass 1 applies
// `pre` and accumulates exact per-block moments merged with Chan's formula (one read of X); the pre-activated values
// stay in a per-thread scratch when the group fits (else pass 2 recomputes them). Pass 2 normalises, applies `post`
// and stores. With a channel reduction the statistics come first, then tasks over (sample, block of positions)
// stream all channels through the reduction.
// GemmGroupNormAct: cpu_gemm.cpp (tiled GEMM through a run-time BLAS or Eigen, then the row epilogue).
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <new>
#include <vector>

#include "core/cpu_blas.h"
#include "core/cpu_gemm.h"
#include "core/cpu_small_s.h"
#include "core/cpu_util.h"
#include "core/message.h"

namespace {

using fusedops::cpu::ChannelParams;
using fusedops::cpu::kMomentBlock;
using fusedops::cpu::Moments;
using fusedops::cpu::ReduceAcc;

constexpr int64_t kScratchMaxFloats = 1LL << 22;  // per-thread scratch for one group (16 MiB)
constexpr int64_t kReducePositions = 256;         // positions per task in the reduce path

using fusedops::core::set_err;  // UTF-8-safe truncation (core/message.h)

// Pointer / extras checks common to both entries (after the descriptor check).
int check_run_args(const fusedops_groupnorm_desc& d, const void* x, const void* gamma, const void* beta,
                   const void* const* extras, int32_t num_extras, const void* y, int32_t* used_extras, char* err,
                   size_t err_len) {
  if (!x || !gamma || !beta || !y) {
    set_err(err, err_len, "null pointer among X, gamma, beta, Y");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  const int32_t need = fusedops_num_extras(&d.pre, &d.post);
  if (num_extras < need || num_extras > FUSEDOPS_MAX_EXTRAS) {
    set_err(err, err_len, "chains reference %d extra input(s), got %d (at most %d)", need, num_extras,
            FUSEDOPS_MAX_EXTRAS);
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  for (int32_t k = 0; k < need; ++k) {
    if (!extras || !extras[k]) {
      set_err(err, err_len, "extra input %d is NULL", k);
      return FUSEDOPS_ERR_INVALID_ARGUMENT;
    }
  }
  *used_extras = need;
  return FUSEDOPS_OK;
}

// Normalise one span of one channel: v <- (v - mean) * (rstd * gamma) + beta.
inline void normalize(float* v, int64_t n, float mean, float scale, float shift) {
  for (int64_t i = 0; i < n; ++i) v[i] = (v[i] - mean) * scale + shift;
}
inline void normalize_to(const float* src, float* dst, int64_t n, float mean, float scale, float shift) {
  for (int64_t i = 0; i < n; ++i) dst[i] = (src[i] - mean) * scale + shift;
}

// Moments::merge_block of the blocks v + j·n, j < nblocks, in order, four blocks at a time. One block's sums are one
// dependent chain of vector adds, so a block at a time is latency-bound (~85 % of a (2, 320, 32, 32) GroupNorm +
// SiLU on a Zen 5 core, perf 2026-11-27); four independent chains run about four times as fast. Each lane k of a
// block's accumulator adds the values i + k in order, as merge_block's accumulator k does, so the sums are the same.
void merge_blocks(Moments& m, const float* v, int64_t n, int64_t nblocks) {
  using A4d = Eigen::Array4d;
  using A4f = Eigen::Array4f;
  int64_t j = 0;
  for (; j + 4 <= nblocks && n > 0; j += 4) {
    const float* p[4] = {v + j * n, v + (j + 1) * n, v + (j + 2) * n, v + (j + 3) * n};
    A4d s[4] = {A4d::Zero(), A4d::Zero(), A4d::Zero(), A4d::Zero()}, q[4] = {s[0], s[1], s[2], s[3]};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int b = 0; b < 4; ++b) s[b] += Eigen::Map<const A4f>(p[b] + i).cast<double>();
    double bm[4];
    const double nb = static_cast<double>(n);
    for (int b = 0; b < 4; ++b) {
      for (int64_t t = i; t < n; ++t) s[b][0] += static_cast<double>(p[b][t]);
      bm[b] = ((s[b][0] + s[b][1]) + (s[b][2] + s[b][3])) / nb;
    }
    for (i = 0; i + 4 <= n; i += 4)
      for (int b = 0; b < 4; ++b) {
        const A4d dv = Eigen::Map<const A4f>(p[b] + i).cast<double>() - bm[b];
        q[b] += dv * dv;
      }
    for (int b = 0; b < 4; ++b) {
      for (int64_t t = i; t < n; ++t) {
        const double dv = static_cast<double>(p[b][t]) - bm[b];
        q[b][0] += dv * dv;
      }
      m.merge(Moments{nb, bm[b], (q[b][0] + q[b][1]) + (q[b][2] + q[b][3])});
    }
  }
  for (; j < nblocks; ++j) m.merge_block(v + j * n, n);
}

// Merge a group of cpg channels of S values (contiguous) into m channel by channel, kMomentBlock values at a time:
// the same blocks in the same order as merging each (channel, block) in turn.
void merge_group(Moments& m, const float* v, int64_t cpg, int64_t S) {
  if (S <= kMomentBlock || S % kMomentBlock == 0) {  // equal blocks back to back
    const int64_t n = std::min(S, kMomentBlock);
    merge_blocks(m, v, n, cpg * S / n);
    return;
  }
  for (int64_t c = 0; c < cpg; ++c) {
    merge_blocks(m, v + c * S, kMomentBlock, S / kMomentBlock);
    m.merge_block(v + c * S + S / kMomentBlock * kMomentBlock, S % kMomentBlock);
  }
}

// Walk [o0, o1) of one (sample, group) span in chunks that never cross a channel: fn(flat offset in the span,
// length, channel index).
template <typename Fn>
void for_each_chunk(int64_t o0, int64_t o1, int64_t S, int64_t first_channel, Fn&& fn) {
  for (int64_t o = o0; o < o1;) {
    const int64_t c = o / S, s = o % S;
    const int64_t len = std::min({kMomentBlock, S - s, o1 - o});
    fn(o, len, first_channel + c);
    o += len;
  }
}

// Statistics of every (sample, group) when there are fewer groups than threads: each group is cut into parts
// whose moments are merged (Chan), so a batch-1 GroupNorm still uses every core.
void group_stats_split(const fusedops_groupnorm_desc& d, const void* x, const ChannelParams& p, int64_t parts,
                       std::vector<float>& mean, std::vector<float>& rstd) {
  const int64_t N = d.N, C = d.C, S = d.S, G = d.num_groups, cpg = C / G, glen = cpg * S;
  const int64_t span = (glen + parts - 1) / parts;
  std::vector<Moments> part(N * G * parts);
  fusedops::cpu::parallel_for(N * G * parts, N * C * S, [&](int64_t t) {
    const int64_t ng = t / parts, k = t % parts, n = ng / G, g = ng % G;
    const int64_t base = (n * C + g * cpg) * S;
    float buf[kMomentBlock];
    Moments m;
    for_each_chunk(k * span, std::min(glen, (k + 1) * span), S, g * cpg, [&](int64_t o, int64_t len, int64_t ch) {
      fusedops::cpu::load_f32(x, d.x_dtype, base + o, len, buf);
      fusedops::cpu::apply_chain(d.pre, buf, len, p.ex, ch, false);
      m.merge_block(buf, len);
    });
    part[t] = m;
  });
  for (int64_t ng = 0; ng < N * G; ++ng) {
    Moments m;
    for (int64_t k = 0; k < parts; ++k) m.merge(part[ng * parts + k]);
    mean[ng] = static_cast<float>(m.mean);
    rstd[ng] = static_cast<float>(1.0 / std::sqrt(m.variance() + static_cast<double>(d.epsilon)));
  }
}

// How many parts to cut each group into: 1 when (sample, group) tasks already fill the threads.
int64_t group_parts(const fusedops_groupnorm_desc& d) {
  const int64_t T = fusedops::cpu::num_threads(), NG = d.N * d.num_groups;
  const int64_t glen = (d.C / d.num_groups) * d.S;
  if (T == 1 || NG >= 2 * T) return 1;
  return std::max<int64_t>(1, std::min<int64_t>((2 * T + NG - 1) / NG, glen / (16 * kMomentBlock)));
}

void groupnorm_no_reduce(const fusedops_groupnorm_desc& d, const void* x, const ChannelParams& p, void* y) {
  const int64_t parts = group_parts(d);
  if (parts > 1) {  // few large groups: split statistics, then split normalisation
    const int64_t N = d.N, C = d.C, S = d.S, G = d.num_groups, cpg = C / G, glen = cpg * S;
    const int64_t span = (glen + parts - 1) / parts;
    std::vector<float> mean(N * G), rstd(N * G);
    group_stats_split(d, x, p, parts, mean, rstd);
    fusedops::cpu::parallel_for(N * G * parts, N * C * S, [&](int64_t t) {
      const int64_t ng = t / parts, k = t % parts, n = ng / G, g = ng % G;
      const int64_t base = (n * C + g * cpg) * S;
      float buf[kMomentBlock];
      for_each_chunk(k * span, std::min(glen, (k + 1) * span), S, g * cpg, [&](int64_t o, int64_t len, int64_t ch) {
        fusedops::cpu::load_f32(x, d.x_dtype, base + o, len, buf);
        fusedops::cpu::apply_chain(d.pre, buf, len, p.ex, ch, false);
        normalize(buf, len, mean[ng], rstd[ng] * p.gamma[ch], p.beta[ch]);
        fusedops::cpu::apply_chain(d.post, buf, len, p.ex, ch, false);
        fusedops::cpu::store_from_f32(buf, len, y, d.x_dtype, base + o);
      });
    });
    return;
  }
  const int64_t N = d.N, C = d.C, S = d.S, G = d.num_groups, cpg = C / G, glen = cpg * S;
  // float32 X without a pre chain is already what the statistics read: no copy into scratch, pass 2 re-reads X (the
  // group was just read, so from cache); float32 Y is normalised into in place. The copies cost ~40 % of the kernel's
  // time on a (2, 320, 32, 32) GroupNorm + SiLU (perf, 2026-11-23), more than its arithmetic.
  const bool x_direct = d.x_dtype == FUSEDOPS_F32 && d.pre.num_steps == 0;
  const bool y_direct = d.x_dtype == FUSEDOPS_F32;
  const bool use_scratch = !x_direct && glen <= kScratchMaxFloats;
  const float* xf = static_cast<const float*>(x);
  float* yf = static_cast<float*>(y);
  fusedops::cpu::parallel_for(N * G, N * C * S, [&](int64_t t) {
    const int64_t n = t / G, g = t % G;
    const int64_t base = (n * C + g * cpg) * S;
    thread_local std::vector<float> scratch;
    if (use_scratch && static_cast<int64_t>(scratch.size()) < glen) scratch.resize(glen);
    float buf[kMomentBlock], out[kMomentBlock];
    Moments m;
    if (x_direct || use_scratch) {  // the group's values, contiguous: blocks merged four at a time
      for (int64_t c = 0; use_scratch && c < cpg; ++c)
        for (int64_t s0 = 0; s0 < S; s0 += kMomentBlock) {
          const int64_t len = std::min(kMomentBlock, S - s0);
          float* v = scratch.data() + c * S + s0;
          fusedops::cpu::load_f32(x, d.x_dtype, base + c * S + s0, len, v);
          fusedops::cpu::apply_chain(d.pre, v, len, p.ex, g * cpg + c, false);
        }
      merge_group(m, x_direct ? xf + base : scratch.data(), cpg, S);
    } else {
      for (int64_t c = 0; c < cpg; ++c)
        for (int64_t s0 = 0; s0 < S; s0 += kMomentBlock) {
          const int64_t len = std::min(kMomentBlock, S - s0);
          fusedops::cpu::load_f32(x, d.x_dtype, base + c * S + s0, len, buf);
          fusedops::cpu::apply_chain(d.pre, buf, len, p.ex, g * cpg + c, false);
          m.merge_block(buf, len);
        }
    }
    const float mean = static_cast<float>(m.mean);
    const float rstd = static_cast<float>(1.0 / std::sqrt(m.variance() + static_cast<double>(d.epsilon)));
    for (int64_t c = 0; c < cpg; ++c) {
      const int64_t ch = g * cpg + c;
      const float scale = rstd * p.gamma[ch], shift = p.beta[ch];
      for (int64_t s0 = 0; s0 < S; s0 += kMomentBlock) {
        const int64_t len = std::min(kMomentBlock, S - s0), at = base + c * S + s0;
        const float* src = out;  // the pre-activated values of this chunk
        if (x_direct) {
          src = xf + at;
        } else if (use_scratch) {
          src = scratch.data() + c * S + s0;
        } else {
          fusedops::cpu::load_f32(x, d.x_dtype, at, len, out);
          fusedops::cpu::apply_chain(d.pre, out, len, p.ex, ch, false);
        }
        float* dst = y_direct ? yf + at : out;
        normalize_to(src, dst, len, mean, scale, shift);
        fusedops::cpu::apply_chain(d.post, dst, len, p.ex, ch, false);
        if (!y_direct) fusedops::cpu::store_from_f32(out, len, y, d.x_dtype, at);
      }
    }
  });
}

void groupnorm_reduce(const fusedops_groupnorm_desc& d, const void* x, const ChannelParams& p, void* y) {
  const int64_t N = d.N, C = d.C, S = d.S, G = d.num_groups, cpg = C / G;
  std::vector<float> mean(N * G), rstd(N * G);
  group_stats_split(d, x, p, group_parts(d), mean, rstd);  // parts = 1: one task per (sample, group)
  const int64_t blocks = (S + kReducePositions - 1) / kReducePositions;
  fusedops::cpu::parallel_for(N * blocks, N * C * S, [&](int64_t t) {
    const int64_t n = t / blocks, s0 = (t % blocks) * kReducePositions;
    const int64_t len = std::min(kReducePositions, S - s0);
    ReduceAcc acc[kReducePositions];
    float buf[kReducePositions];
    fusedops::cpu::reduce_init(d.reduce, acc, len);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / cpg;
      fusedops::cpu::load_f32(x, d.x_dtype, (n * C + c) * S + s0, len, buf);
      fusedops::cpu::apply_chain(d.pre, buf, len, p.ex, c, false);
      normalize(buf, len, mean[n * G + g], rstd[n * G + g] * p.gamma[c], p.beta[c]);
      fusedops::cpu::apply_chain(d.post, buf, len, p.ex, c, false);
      fusedops::cpu::reduce_update(d.reduce, acc, buf, len);
    }
    for (int64_t i = 0; i < len; ++i) buf[i] = fusedops::cpu::reduce_final(d.reduce, acc[i], C);
    fusedops::cpu::store_from_f32(buf, len, y, d.x_dtype, n * S + s0);
  });
}

}  // namespace

extern "C" {

FUSEDOPS_API int fusedops_groupnorm_act_cpu(const fusedops_groupnorm_desc* d, const void* x, const void* gamma,
                                            const void* beta, const void* const* extras, int32_t num_extras,
                                            void* y, char* err, size_t err_len) {
  int rc = fusedops_groupnorm_act_check(d, err, err_len);
  if (rc) return rc;
  int32_t used = 0;
  rc = check_run_args(*d, x, gamma, beta, extras, num_extras, y, &used, err, err_len);
  if (rc) return rc;
  try {
    ChannelParams p;
    p.load(*d, gamma, beta, nullptr, extras, used);
    if (fusedops::cpu::use_small_s_path(*d, used))
      fusedops::cpu::groupnorm_small_s(*d, x, p, y);
    else if (d->reduce == FUSEDOPS_REDUCE_NONE)
      groupnorm_no_reduce(*d, x, p, y);
    else
      groupnorm_reduce(*d, x, p, y);
  } catch (const std::bad_alloc&) {
    set_err(err, err_len, "out of host memory");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    set_err(err, err_len, "CPU kernel failed: %s", e.what());
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  return FUSEDOPS_OK;
}

FUSEDOPS_API int fusedops_gemm_groupnorm_act_cpu(const fusedops_gemm_desc* d, const void* x, const void* w,
                                                 const void* bias, const void* gamma, const void* beta,
                                                 const void* const* extras, int32_t num_extras, void* y,
                                                 char* err, size_t err_len) {
  int rc = fusedops_gemm_groupnorm_act_check(d, err, err_len);
  if (rc) return rc;
  int32_t used = 0;
  rc = check_run_args(d->gn, x, gamma, beta, extras, num_extras, y, &used, err, err_len);
  if (rc) return rc;
  if (!w) {
    set_err(err, err_len, "W is NULL");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  try {
    ChannelParams p;
    p.load(d->gn, gamma, beta, bias, extras, used);
    fusedops::cpu::gemm_groupnorm(*d, x, w, p, y);
  } catch (const std::bad_alloc&) {
    set_err(err, err_len, "out of host memory");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    set_err(err, err_len, "CPU kernel failed: %s", e.what());
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
  return FUSEDOPS_OK;
}

FUSEDOPS_API int fusedops_set_cpu_blas(const char* path, char* err, size_t err_len) {
  return fusedops::cpu::set_blas(path, err, err_len) ? FUSEDOPS_ERR_INVALID_ARGUMENT : FUSEDOPS_OK;
}

FUSEDOPS_API const char* fusedops_cpu_blas(void) { return fusedops::cpu::blas_description(); }

}  // extern "C"
