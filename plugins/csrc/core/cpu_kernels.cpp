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

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
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
using fusedops::cpu::kMinParallelWork;
using fusedops::cpu::kMomentBlock;
using fusedops::cpu::Moments;
using fusedops::cpu::ReduceAcc;

constexpr int64_t kScratchMaxFloats = 1LL << 22;  // per-thread scratch for one group (16 MiB)
constexpr int64_t kReducePositions = 256;         // positions per task in the reduce path
constexpr int64_t kBatchBlocks = 4;               // small groups a task: at least four moment blocks (merge_blocks)
constexpr int64_t kMaxGroupBatch = 64;            // ... and at most this many groups

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

// Whether apply_chain gives each element the same result on a span of whole channels as channel by channel: no step
// reads a per-channel extra, and no step buffers its values in chunks of its own (mish). Eigen's scalar path (the
// unaligned head and the tail of a span) can differ from its vector path (its float exp, say), so the caller also
// needs channels that are whole vectors at 64-byte-aligned addresses: S a multiple of 16 and Y aligned to 64 bytes.
bool span_independent(const fusedops_chain& c) {
  for (int32_t i = 0; i < c.num_steps; ++i) {
    const fusedops_step& s = c.steps[i];
    if (s.op == FUSEDOPS_STEP_MISH || (fusedops_step_is_binary(s.op) && s.operand >= 0)) return false;
  }
  return true;
}

// Normalise one span of one channel: v <- (v - mean) * (rstd * gamma) + beta.
inline void normalize(float* v, int64_t n, float mean, float scale, float shift) {
  for (int64_t i = 0; i < n; ++i) v[i] = (v[i] - mean) * scale + shift;
}
inline void normalize_to(const float* src, float* dst, int64_t n, float mean, float scale, float shift) {
  for (int64_t i = 0; i < n; ++i) dst[i] = (src[i] - mean) * scale + shift;
}

// The moments {n, mean, M2} of each block v + j·n, j < B, exactly as Moments::merge_block(v + j·n, n) forms them
// before merging: lane k of a block's accumulator adds the values i + k in order (the tail into lane 0), as
// merge_block's accumulator k does. One block's sums are one dependent chain of vector adds, so a block at a time is
// latency-bound (~85 % of a (2, 320, 32, 32) GroupNorm + SiLU on a Zen 5 core, perf 2026-11-27); B independent
// chains run about B times as fast.
template <int B>
void block_moments(const float* v, int64_t n, Moments* out) {
  const float* p[B];
  double s[B][4], q[B][4], bm[B];
  for (int b = 0; b < B; ++b) p[b] = v + b * n;
  int64_t i = 0;
#if defined(__AVX__)
  // Explicit 4-double vectors: left to itself GCC packs pairs of blocks into 8-double vectors through scalar inserts
  // (two chains instead of four, and shuffles). Lane k is the same add chain either way.
  {
    __m256d vs[B];
    for (int b = 0; b < B; ++b) vs[b] = _mm256_setzero_pd();
    for (; i + 4 <= n; i += 4)
      for (int b = 0; b < B; ++b) vs[b] = _mm256_add_pd(vs[b], _mm256_cvtps_pd(_mm_loadu_ps(p[b] + i)));
    for (int b = 0; b < B; ++b) _mm256_storeu_pd(s[b], vs[b]);
  }
#else
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < 4; ++k) s[b][k] = 0.0;
  for (; i + 4 <= n; i += 4)
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < 4; ++k) s[b][k] += static_cast<double>(p[b][i + k]);
#endif
  const double nb = static_cast<double>(n);
  for (int b = 0; b < B; ++b) {
    for (int64_t t = i; t < n; ++t) s[b][0] += static_cast<double>(p[b][t]);
    bm[b] = ((s[b][0] + s[b][1]) + (s[b][2] + s[b][3])) / nb;
  }
  i = 0;
#if defined(__AVX__)
  {
    __m256d vq[B], vm[B];
    for (int b = 0; b < B; ++b) {
      vq[b] = _mm256_setzero_pd();
      vm[b] = _mm256_set1_pd(bm[b]);
    }
    for (; i + 4 <= n; i += 4)
      for (int b = 0; b < B; ++b) {
        const __m256d dv = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(p[b] + i)), vm[b]);
#if defined(__FMA__)
        vq[b] = _mm256_fmadd_pd(dv, dv, vq[b]);  // as the compiler contracts merge_block's q += d * d
#else
        vq[b] = _mm256_add_pd(vq[b], _mm256_mul_pd(dv, dv));
#endif
      }
    for (int b = 0; b < B; ++b) _mm256_storeu_pd(q[b], vq[b]);
  }
#else
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < 4; ++k) q[b][k] = 0.0;
  for (; i + 4 <= n; i += 4)
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < 4; ++k) {
        const double dv = static_cast<double>(p[b][i + k]) - bm[b];
        q[b][k] += dv * dv;
      }
#endif
  for (int b = 0; b < B; ++b) {
    for (int64_t t = i; t < n; ++t) {
      const double dv = static_cast<double>(p[b][t]) - bm[b];
      q[b][0] += dv * dv;
    }
    out[b] = Moments{nb, bm[b], (q[b][0] + q[b][1]) + (q[b][2] + q[b][3])};
  }
}

// Merge the blocks v + j·n, j < nblocks (n > 0), in order into m[j / per], one Moments per run of `per` blocks:
// the same sums in the same order as merge_block one block at a time. Blocks four at a time, across runs too
// (groups of fewer than four blocks are batched by the caller).
void merge_blocks(Moments* m, const float* v, int64_t n, int64_t nblocks, int64_t per = -1) {
  if (per < 0) per = nblocks;
  Moments bmom[4];
  for (int64_t j = 0; j < nblocks; j += 4) {
    const int64_t k = std::min<int64_t>(4, nblocks - j);
    const float* p = v + j * n;
    if (k == 4) block_moments<4>(p, n, bmom);
    else if (k == 3) block_moments<3>(p, n, bmom);
    else if (k == 2) block_moments<2>(p, n, bmom);
    else block_moments<1>(p, n, bmom);
    for (int64_t b = 0; b < k; ++b) m[(j + b) / per].merge(bmom[b]);
  }
}

// Merge a group of cpg channels of S values (contiguous) into m channel by channel, kMomentBlock values at a time:
// the same blocks in the same order as merging each (channel, block) in turn.
void merge_group(Moments& m, const float* v, int64_t cpg, int64_t S) {
  if (S <= kMomentBlock || S % kMomentBlock == 0) {  // equal blocks back to back
    const int64_t n = std::min(S, kMomentBlock);
    merge_blocks(&m, v, n, cpg * S / n);
    return;
  }
  for (int64_t c = 0; c < cpg; ++c) {
    merge_blocks(&m, v + c * S, kMomentBlock, S / kMomentBlock);
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
  // A task takes `batch` consecutive (sample, group) spans, which lie back to back. Groups of fewer than four equal
  // moment blocks (say 2 channels of 64) are batched so that their block sums still run four chains at a time
  // (merge_blocks) and the scalar work of one group (merges, divisions, square root) overlaps the next one's; the
  // sums and merges are those of one group at a time, in the same order.
  // Small groups are also batched up to one block of values (but never below four tasks a thread), and where
  // span_independent allows, the post chain runs once over the batch's span (the same bits): one call instead of one
  // a channel, whose fixed cost dominated a (4, 64, 8, 8) GroupNorm + SiLU.
  const bool contiguous = x_direct || use_scratch;
  const int64_t bn = std::min(S, kMomentBlock), gblocks = glen / bn;
  const bool batch_groups = contiguous && (S <= kMomentBlock || S % kMomentBlock == 0);
  int64_t batch = 1;
  if (batch_groups) {
    batch = std::min(kMaxGroupBatch, std::max((kBatchBlocks + gblocks - 1) / gblocks, kMomentBlock / glen));
    const int64_t T = fusedops::cpu::num_threads();
    if (T > 1 && N * C * S >= kMinParallelWork) batch = std::min(batch, std::max<int64_t>(1, N * G / (4 * T)));
    batch = std::min(batch, N * G);
  }
  const bool post_on_span = y_direct && batch > 1 && span_independent(d.post) && S % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(y) % 64 == 0;
  fusedops::cpu::parallel_for((N * G + batch - 1) / batch, N * C * S, [&](int64_t t) {
    const int64_t ng0 = t * batch, groups = std::min(batch, N * G - ng0);
    thread_local std::vector<float> scratch;
    if (use_scratch && static_cast<int64_t>(scratch.size()) < groups * glen) scratch.resize(groups * glen);
    float buf[kMomentBlock], out[kMomentBlock];
    Moments m[kMaxGroupBatch];
    if (contiguous) {  // the groups' values, contiguous: blocks merged four at a time
      for (int64_t j = 0; use_scratch && j < groups; ++j)
        for (int64_t c = 0; c < cpg; ++c)
          for (int64_t s0 = 0; s0 < S; s0 += kMomentBlock) {
            const int64_t len = std::min(kMomentBlock, S - s0);
            float* v = scratch.data() + j * glen + c * S + s0;
            fusedops::cpu::load_f32(x, d.x_dtype, (ng0 + j) * glen + c * S + s0, len, v);
            fusedops::cpu::apply_chain(d.pre, v, len, p.ex, (ng0 + j) % G * cpg + c, false);
          }
      const float* v = x_direct ? xf + ng0 * glen : scratch.data();
      if (batch_groups)
        merge_blocks(m, v, bn, groups * gblocks, gblocks);
      else
        merge_group(m[0], v, cpg, S);
    } else {
      const int64_t g = ng0 % G;
      for (int64_t c = 0; c < cpg; ++c)
        for (int64_t s0 = 0; s0 < S; s0 += kMomentBlock) {
          const int64_t len = std::min(kMomentBlock, S - s0);
          fusedops::cpu::load_f32(x, d.x_dtype, ng0 * glen + c * S + s0, len, buf);
          fusedops::cpu::apply_chain(d.pre, buf, len, p.ex, g * cpg + c, false);
          m[0].merge_block(buf, len);
        }
    }
    for (int64_t j = 0; j < groups; ++j) {
      const int64_t g = (ng0 + j) % G, base = (ng0 + j) * glen;
      const float mean = static_cast<float>(m[j].mean);
      const float rstd = static_cast<float>(1.0 / std::sqrt(m[j].variance() + static_cast<double>(d.epsilon)));
      for (int64_t c = 0; c < cpg; ++c) {
        const int64_t ch = g * cpg + c;
        const float scale = rstd * p.gamma[ch], shift = p.beta[ch];
        for (int64_t s0 = 0; s0 < S; s0 += kMomentBlock) {
          const int64_t len = std::min(kMomentBlock, S - s0), at = base + c * S + s0;
          const float* src = out;  // the pre-activated values of this chunk
          if (x_direct) {
            src = xf + at;
          } else if (use_scratch) {
            src = scratch.data() + j * glen + c * S + s0;
          } else {
            fusedops::cpu::load_f32(x, d.x_dtype, at, len, out);
            fusedops::cpu::apply_chain(d.pre, out, len, p.ex, ch, false);
          }
          float* dst = y_direct ? yf + at : out;
          normalize_to(src, dst, len, mean, scale, shift);
          if (post_on_span) continue;
          fusedops::cpu::apply_chain(d.post, dst, len, p.ex, ch, false);
          if (!y_direct) fusedops::cpu::store_from_f32(out, len, y, d.x_dtype, at);
        }
      }
    }
    if (post_on_span) fusedops::cpu::apply_chain(d.post, yf + ng0 * glen, groups * glen, p.ex, 0, false);
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
