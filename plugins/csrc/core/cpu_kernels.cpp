// CPU entries: fusedops_groupnorm_act_cpu and fusedops_gemm_groupnorm_act_cpu (float32 / float16 / bfloat16 storage,
// float32 math, float32 statistics merged in double).
//
// GroupNormAct: small spatial sizes (S < 32, S = 1 for every (N, C) input) take cpu_small_s.cpp's path; otherwise
// one task per (sample, group) — a group is one contiguous span of (C/G)·S elements. Pass 1 applies
// `pre` and accumulates exact per-block moments merged with Chan's formula (one read of X); the pre-activated values
// stay in a per-thread scratch when the group fits (else pass 2 recomputes them). Pass 2 normalises, applies `post`
// and stores. With a channel reduction the statistics come first, then tasks over (sample, block of positions)
// stream all channels through the reduction.
// GemmGroupNormAct: a cache-blocked GEMM in 2-D tiles (mostly column blocks, so each thread packs only its slice of
// W) into a float32 Z, then the epilogue — bias, pre, GroupNorm, post, reduce — over blocks of rows. The tile GEMM is
// a run-time loaded BLAS's single-threaded SGEMM when one is available (cpu_blas.h: OpenBLAS runs ~2x Eigen's speed
// on AVX2), else Eigen's.
// (Row blocks with the epilogue on the hot block were tried first: every thread then repacks all of W, which on
// 16 cores made the GEMM ~2x slower than MLAS; writing and re-reading Z costs far less.)
#define EIGEN_DONT_PARALLELIZE  // threads come from our pool, one Eigen GEMM per task
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <new>
#include <vector>

#include "core/cpu_blas.h"
#include "core/cpu_small_s.h"
#include "core/cpu_util.h"
#include "core/message.h"

namespace {

using fusedops::cpu::ChannelParams;
using fusedops::cpu::Moments;
using fusedops::cpu::ReduceAcc;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int64_t kChunk = 1024;                   // elements per block: stays in L1 between passes
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

// Walk [o0, o1) of one (sample, group) span in chunks that never cross a channel: fn(flat offset in the span,
// length, channel index).
template <typename Fn>
void for_each_chunk(int64_t o0, int64_t o1, int64_t S, int64_t first_channel, Fn&& fn) {
  for (int64_t o = o0; o < o1;) {
    const int64_t c = o / S, s = o % S;
    const int64_t len = std::min({kChunk, S - s, o1 - o});
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
    float buf[kChunk];
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
  return std::max<int64_t>(1, std::min<int64_t>((2 * T + NG - 1) / NG, glen / (16 * kChunk)));
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
      float buf[kChunk];
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
    float buf[kChunk], out[kChunk];
    Moments m;
    for (int64_t c = 0; c < cpg; ++c) {
      const int64_t ch = g * cpg + c;
      for (int64_t s0 = 0; s0 < S; s0 += kChunk) {
        const int64_t len = std::min(kChunk, S - s0);
        if (x_direct) {
          m.merge_block(xf + base + c * S + s0, len);
          continue;
        }
        float* v = use_scratch ? scratch.data() + c * S + s0 : buf;
        fusedops::cpu::load_f32(x, d.x_dtype, base + c * S + s0, len, v);
        fusedops::cpu::apply_chain(d.pre, v, len, p.ex, ch, false);
        m.merge_block(v, len);
      }
    }
    const float mean = static_cast<float>(m.mean);
    const float rstd = static_cast<float>(1.0 / std::sqrt(m.variance() + static_cast<double>(d.epsilon)));
    for (int64_t c = 0; c < cpg; ++c) {
      const int64_t ch = g * cpg + c;
      const float scale = rstd * p.gamma[ch], shift = p.beta[ch];
      for (int64_t s0 = 0; s0 < S; s0 += kChunk) {
        const int64_t len = std::min(kChunk, S - s0), at = base + c * S + s0;
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

// Mean and 1/std of each of a row's G contiguous groups of cpg <= kChunk values: the exact two-pass moments of
// Moments::merge_block for one block (double, four accumulators), with the divisions and square roots batched over
// the row's groups afterwards. Per group they formed one dependent vdivsd / vsqrtsd chain that cost more than all
// other epilogue passes together (perf, 2026-11-23: half the epilogue's time for C = 512, 32 groups).
void row_group_stats(const float* z, int64_t G, int64_t cpg, double eps, double* mean, double* rstd) {
  const double inv_n = 1.0 / static_cast<double>(cpg);
  for (int64_t g = 0; g < G; ++g) {
    const float* v = z + g * cpg;
    double s[4] = {0, 0, 0, 0}, q[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= cpg; i += 4)
      for (int k = 0; k < 4; ++k) s[k] += static_cast<double>(v[i + k]);
    for (; i < cpg; ++i) s[0] += static_cast<double>(v[i]);
    const double m = ((s[0] + s[1]) + (s[2] + s[3])) * inv_n;
    for (i = 0; i + 4 <= cpg; i += 4)
      for (int k = 0; k < 4; ++k) {
        const double dv = static_cast<double>(v[i + k]) - m;
        q[k] += dv * dv;
      }
    for (; i < cpg; ++i) q[0] += (static_cast<double>(v[i]) - m) * (static_cast<double>(v[i]) - m);
    mean[g] = m;
    rstd[g] = ((q[0] + q[1]) + (q[2] + q[3])) * inv_n;  // the variance until the line below
  }
  // Eigen's packet sqrt / divide: a plain std::sqrt loop stays scalar (errno handling keeps it from vectorising).
  Eigen::Map<Eigen::ArrayXd> r(rstd, G);
  r = (r + eps).sqrt().inverse();
}

// Epilogue of one GEMM row z[0..C): bias, pre, GroupNorm over contiguous channel groups, post, reduce/store.
// stats: scratch of 2·G doubles.
void gemm_row_epilogue(const fusedops_groupnorm_desc& d, const ChannelParams& p, float* z, int64_t row, void* y,
                       double* stats) {
  const int64_t C = d.C, G = d.num_groups, cpg = C / G;
  if (!p.bias.empty()) {  // bias is optional in the ABI (NULL = none)
    const float* bias = p.bias.data();
    for (int64_t c = 0; c < C; ++c) z[c] += bias[c];
  }
  fusedops::cpu::apply_chain(d.pre, z, C, p.ex, 0, true);
  double *gmean = stats, *grstd = stats + G;
  if (cpg <= kChunk) {
    row_group_stats(z, G, cpg, static_cast<double>(d.epsilon), gmean, grstd);
  } else {  // groups longer than a block: blocks merged (Chan), as the GroupNorm kernels do
    for (int64_t g = 0; g < G; ++g) {
      Moments m;
      for (int64_t o = 0; o < cpg; o += kChunk) m.merge_block(z + g * cpg + o, std::min(kChunk, cpg - o));
      gmean[g] = m.mean;
      grstd[g] = 1.0 / std::sqrt(m.variance() + static_cast<double>(d.epsilon));
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    float* v = z + g * cpg;
    const float mean = static_cast<float>(gmean[g]), rstd = static_cast<float>(grstd[g]);
    const float* gm = p.gamma.data() + g * cpg;
    const float* bt = p.beta.data() + g * cpg;
    for (int64_t c = 0; c < cpg; ++c) v[c] = (v[c] - mean) * (rstd * gm[c]) + bt[c];
  }
  fusedops::cpu::apply_chain(d.post, z, C, p.ex, 0, true);
  if (d.reduce == FUSEDOPS_REDUCE_NONE) {
    fusedops::cpu::store_from_f32(z, C, y, d.x_dtype, row * C);
  } else {
    ReduceAcc acc;
    fusedops::cpu::reduce_init(d.reduce, &acc, 1);
    fusedops::cpu::reduce_span(d.reduce, acc, z, C);
    const float r = fusedops::cpu::reduce_final(d.reduce, acc, C);
    fusedops::cpu::store_from_f32(&r, 1, y, d.x_dtype, row);
  }
}

// Z(rows x C) = X(rows x K) · op(W) with W (C, K) when trans_b, else (K, C); wf is float32. `blas` (nullptr:
// Eigen) is read once per GEMM so every tile of one call uses the same library.
void gemm_block(fusedops::cpu::SgemmFn blas, const float* xf, int64_t rows, int64_t K, const float* wf, int64_t C,
                bool trans_b, int64_t c0, int64_t nc, float* z, int64_t ldz) {
  if (blas) {  // row-major CBLAS: 101; A not transposed 111; B transposed 112 (W is C x K) or not 111 (K x C)
    if (K == 0) {  // CBLAS requires leading dimensions >= 1 and some BLAS reject K = 0 without writing C
      for (int64_t r = 0; r < rows; ++r) std::fill_n(z + r * ldz, nc, 0.0f);
      return;
    }
    blas(101, 111, trans_b ? 112 : 111, static_cast<int>(rows), static_cast<int>(nc), static_cast<int>(K), 1.0f, xf,
         static_cast<int>(K), trans_b ? wf + c0 * K : wf + c0, static_cast<int>(trans_b ? K : C), 0.0f, z,
         static_cast<int>(ldz));
    return;
  }
  Eigen::Map<const RowMat> X(xf, rows, K);
  Eigen::Map<RowMat, 0, Eigen::OuterStride<>> Z(z, rows, nc, Eigen::OuterStride<>(ldz));
  if (trans_b) {
    Eigen::Map<const RowMat> W(wf + c0 * K, nc, K);
    Z.noalias() = X * W.transpose();
  } else {
    Eigen::Map<const RowMat, 0, Eigen::OuterStride<>> W(wf + c0, K, nc, Eigen::OuterStride<>(C));
    Z.noalias() = X * W;
  }
}

void gemm_groupnorm(const fusedops_gemm_desc& gd, const void* x, const void* w, const ChannelParams& p, void* y) {
  const fusedops_groupnorm_desc& d = gd.gn;
  const int64_t M = d.N, C = d.C, K = gd.K;
  const int T = fusedops::cpu::num_threads();
  const bool f32 = d.x_dtype == FUSEDOPS_F32;
  // 16-bit W / X: one conversion to float32, then the float32 GEMM (float32 accumulation either way).
  std::vector<float> wconv;
  const float* wf = static_cast<const float*>(w);
  if (!f32) {
    wconv.resize(C * K);
    const int64_t blk = std::max<int64_t>(1, (C * K + 4 * T - 1) / (4 * T));
    const int64_t n = (C * K + blk - 1) / blk;
    fusedops::cpu::parallel_for(n, C * K, [&](int64_t t) {
      const int64_t o = t * blk, len = std::min(blk, C * K - o);
      fusedops::cpu::load_f32(w, d.x_dtype, o, len, wconv.data() + o);
    });
    wf = wconv.data();
  }
  const bool trans_b = gd.trans_b != 0;
  const int64_t gemm_work = M * C * K;
  // The BLAS takes int dimensions; leading dimensions are at most max(K, C).
  const fusedops::cpu::SgemmFn blas =
      std::max({M, C, K}) <= fusedops::cpu::kBlasMaxDim ? fusedops::cpu::blas_sgemm() : nullptr;
  if (gemm_work < (1 << 18)) {
    // Tiny problem: one task, no thread wake-ups.
    std::vector<float> z(C), xrow(K);
    std::vector<double> stats(2 * d.num_groups);
    for (int64_t r = 0; r < M; ++r) {
      const float* xf = static_cast<const float*>(x) + r * K;
      if (!f32) {
        fusedops::cpu::load_f32(x, d.x_dtype, r * K, K, xrow.data());
        xf = xrow.data();
      }
      gemm_block(blas, xf, 1, K, wf, C, trans_b, 0, C, z.data(), C);
      gemm_row_epilogue(d, p, z.data(), r, y, stats.data());
    }
    return;
  }
  // Phase 1: Z = X·op(W) in 2-D tiles. Each tile's Eigen GEMM packs its X rows and W columns, so the tiling
  // decides the repacking traffic: W (C·K) is repacked once per row block and X (M·K) once per column block.
  // Split columns first (W is usually the larger operand), rows only when there are too few column blocks;
  // about two tiles per thread keep the dynamic schedule balanced when other processes share the cores.
  const int64_t want_tiles = 2 * static_cast<int64_t>(T);
  const int64_t max_tn = std::max<int64_t>(1, C / 64), max_tm = std::max<int64_t>(1, M / 8);
  int64_t tn, tm;
  if (C >= M) {  // W (C·K) is at least as large as X (M·K)
    tn = std::min(want_tiles, max_tn);
    tm = std::min((want_tiles + tn - 1) / tn, max_tm);
  } else {
    tm = std::min(want_tiles, max_tm);
    tn = std::min((want_tiles + tm - 1) / tm, max_tn);
  }
  int64_t cb = (C + tn - 1) / tn;
  cb = std::min(C, (cb + 15) / 16 * 16);
  tn = (C + cb - 1) / cb;
  const int64_t rb = (M + tm - 1) / tm;
  tm = (M + rb - 1) / rb;
  std::unique_ptr<float[]> z(new float[static_cast<size_t>(M * C)]);  // uninitialised: every tile writes its part
  std::vector<float> xconv;
  const float* xf = static_cast<const float*>(x);
  if (!f32) {
    xconv.resize(M * K);
    const int64_t blk = std::max<int64_t>(1, (M * K + 4 * T - 1) / (4 * T));
    fusedops::cpu::parallel_for((M * K + blk - 1) / blk, M * K, [&](int64_t t) {
      const int64_t o = t * blk, len = std::min(blk, M * K - o);
      fusedops::cpu::load_f32(x, d.x_dtype, o, len, xconv.data() + o);
    });
    xf = xconv.data();
  }
  fusedops::cpu::parallel_for(tm * tn, [&](int64_t t) {
    const int64_t r0 = (t / tn) * rb, c0 = (t % tn) * cb;
    const int64_t rows = std::min(rb, M - r0), nc = std::min(cb, C - c0);
    gemm_block(blas, xf + r0 * K, rows, K, wf, C, trans_b, c0, nc, z.get() + r0 * C + c0, C);
  });
  // Phase 2: the epilogue needs whole rows (groups and the channel reduction span all of C).
  const int64_t eb = std::max<int64_t>(1, std::min<int64_t>(64, M / (4 * T)));
  fusedops::cpu::parallel_for((M + eb - 1) / eb, M * C, [&](int64_t t) {
    std::vector<double> stats(2 * d.num_groups);
    for (int64_t r = t * eb; r < std::min(M, (t + 1) * eb); ++r)
      gemm_row_epilogue(d, p, z.get() + r * C, r, y, stats.data());
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
    gemm_groupnorm(*d, x, w, p, y);
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
