// GemmGroupNormAct on the CPU: Y = GroupNormAct(X·op(W) + bias) over rows (float32 / float16 / bfloat16 storage,
// float32 GEMM and math, group statistics in double).
//
// GEMM: 2-D tiles (mostly column blocks when W is the larger operand, so each thread packs only its slice of W; row
// blocks otherwise), each one single-threaded SGEMM of a run-time loaded BLAS (cpu_blas.h: OpenBLAS runs ~2x Eigen's
// speed on AVX2), else Eigen's, accumulating onto the bias written into the tile first. A float32 Y without a channel
// reduction is the GEMM's output itself and the epilogue works on it in place (no M x C scratch, no copy); otherwise
// the tiles write a float32 scratch Z.
// Epilogue (pre, GroupNorm over contiguous channel groups, post, store / reduce): over L1-sized blocks of whole rows,
// one step at a time, each step a tight loop over the block that the compiler vectorises (the row-by-row walk it
// replaced cost ~3.4 ns an element on 1024 x 512, 32 groups, SiLU; now ~1.2). Where tiles span all of C (row tiles)
// each task runs it on its rows right after their GEMM; otherwise after all tiles, in blocks of rows. (Row tiles for
// every shape were tried first: every thread then repacks all of W, which on 16 cores made the GEMM ~2x slower than
// MLAS; writing and re-reading Z costs far less.)
#define EIGEN_DONT_PARALLELIZE  // threads come from our pool, one GEMM per task
#include "core/cpu_gemm.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/cpu_blas.h"

namespace fusedops {
namespace cpu {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int64_t kEpilogueFloats = 4096;  // a block of rows the epilogue steps walk: 16 KiB stays in L1
constexpr int64_t kMinTileRows = 512;      // row tiles shorter than this only where threads would idle otherwise

// Whether a chain reads a per-channel operand (element i of a span is channel c0 + i): then it runs row by row;
// otherwise once over a block of rows.
bool reads_channel_operand(const fusedops_chain& ch) {
  for (int32_t i = 0; i < ch.num_steps; ++i)
    if (fusedops_step_is_binary(ch.steps[i].op) && ch.steps[i].operand >= 0) return true;
  return false;
}

void chain_rows(const fusedops_chain& ch, const ChannelParams& p, float* z, int64_t rows, int64_t C, bool by_row) {
  if (ch.num_steps == 0) return;
  if (!by_row) {
    apply_chain(ch, z, rows * C, p.ex, 0, true);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) apply_chain(ch, z + r * C, C, p.ex, 0, true);
}

// Mean and variance of each of G contiguous groups of n <= kMomentBlock values: Moments::merge_block's exact two-pass
// moments (double, four accumulators, same order). kN > 0 fixes n at compile time: the loops unroll, and the
// group's values converted to double for the sums are reused for the deviations (measured: 1024 x 512, 32 groups,
// sums of all groups first and then all deviations were 0.08 ms slower at 512-bit vectors).
template <int64_t kN>
void group_moments(const float* z, int64_t G, int64_t n_rt, double* mean, double* var) {
  const int64_t n = kN > 0 ? kN : n_rt;
  const double inv_n = 1.0 / static_cast<double>(n);
  for (int64_t g = 0; g < G; ++g) {
    const float* v = z + g * n;
    double s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int k = 0; k < 4; ++k) s[k] += static_cast<double>(v[i + k]);
    for (; i < n; ++i) s[0] += static_cast<double>(v[i]);
    const double m = ((s[0] + s[1]) + (s[2] + s[3])) * inv_n;
    mean[g] = m;
    double q[4] = {0, 0, 0, 0};
    i = 0;
    for (; i + 4 <= n; i += 4)
      for (int k = 0; k < 4; ++k) {
        const double dv = static_cast<double>(v[i + k]) - m;
        q[k] += dv * dv;
      }
    for (; i < n; ++i) q[0] += (static_cast<double>(v[i]) - m) * (static_cast<double>(v[i]) - m);
    var[g] = ((q[0] + q[1]) + (q[2] + q[3])) * inv_n;
  }
}

// The moments of G contiguous groups of cpg values; groups longer than a block merge blocks (Chan), as the GroupNorm
// kernels do.
void group_moments_of(const float* z, int64_t G, int64_t cpg, double* mean, double* var) {
  switch (cpg) {  // the usual group sizes (C / 32 for C = 128 ... 2048) unrolled
    case 4: return group_moments<4>(z, G, cpg, mean, var);
    case 8: return group_moments<8>(z, G, cpg, mean, var);
    case 16: return group_moments<16>(z, G, cpg, mean, var);
    case 32: return group_moments<32>(z, G, cpg, mean, var);
    case 64: return group_moments<64>(z, G, cpg, mean, var);
    default: break;
  }
  if (cpg <= kMomentBlock) return group_moments<0>(z, G, cpg, mean, var);
  for (int64_t g = 0; g < G; ++g) {
    Moments m;
    for (int64_t o = 0; o < cpg; o += kMomentBlock)
      m.merge_block(z + g * cpg + o, std::min(kMomentBlock, cpg - o));
    mean[g] = m.mean;
    var[g] = m.variance();
  }
}

// v <- (v - mean) * (rstd * gamma) + beta over one row's G groups of cpg channels. __restrict: the pointers never
// alias, and without it each group's short loop is versioned on run-time overlap checks (~0.05 ms of 1024 x 512).
void normalize_row(float* __restrict v, const float* __restrict gamma, const float* __restrict beta, int64_t G,
                   int64_t cpg, const double* __restrict mean, const double* __restrict rstd) {
  for (int64_t g = 0; g < G; ++g) {
    const float m = static_cast<float>(mean[g]), s = static_cast<float>(rstd[g]);
    for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) v[c] = (v[c] - m) * (s * gamma[c]) + beta[c];
  }
}

// The epilogue of `rows` rows z[0 .. rows·C) (float32, bias included: gemm_block), rows row0 ... of the output, in
// place; then stored into y unless z is Y already (in_place). stats: scratch of 2 · rows · G doubles.
void epilogue_block(const fusedops_groupnorm_desc& d, const ChannelParams& p, float* z, int64_t row0, int64_t rows,
                    void* y, bool in_place, double* stats) {
  const int64_t C = d.C, G = d.num_groups, cpg = C / G;
  chain_rows(d.pre, p, z, rows, C, reads_channel_operand(d.pre));
  double *mean = stats, *rstd = stats + rows * G;
  group_moments_of(z, rows * G, cpg, mean, rstd);  // the block's rows are one run of rows · G groups
  // 1/sqrt(var + eps) of the whole block at once through Eigen's packet sqrt / divide: per group they formed one
  // dependent vdivsd / vsqrtsd chain, and a std::sqrt loop stays scalar (errno).
  Eigen::Map<Eigen::ArrayXd> rs(rstd, rows * G);
  rs = (rs + static_cast<double>(d.epsilon)).sqrt().inverse();
  for (int64_t r = 0; r < rows; ++r)
    normalize_row(z + r * C, p.gamma.data(), p.beta.data(), G, cpg, mean + r * G, rstd + r * G);
  chain_rows(d.post, p, z, rows, C, reads_channel_operand(d.post));
  if (d.reduce != FUSEDOPS_REDUCE_NONE) {
    for (int64_t r = 0; r < rows; ++r) {
      ReduceAcc acc;
      reduce_init(d.reduce, &acc, 1);
      reduce_span(d.reduce, acc, z + r * C, C);
      const float out = reduce_final(d.reduce, acc, C);
      store_from_f32(&out, 1, y, d.x_dtype, row0 + r);
    }
  } else if (!in_place) {
    store_from_f32(z, rows * C, y, d.x_dtype, row0 * C);
  }
}

// The epilogue of rows [r0, r0 + rows) of Z (row-major, C wide), in L1-sized blocks of rows.
void epilogue_rows(const fusedops_groupnorm_desc& d, const ChannelParams& p, float* z, int64_t r0, int64_t rows,
                   void* y, bool in_place) {
  const int64_t C = d.C, G = d.num_groups;
  const int64_t rb = std::max<int64_t>(1, std::min(rows, kEpilogueFloats / C));
  std::vector<double> stats(2 * rb * G);
  for (int64_t r = r0; r < r0 + rows; r += rb)
    epilogue_block(d, p, z + r * C, r, std::min(rb, r0 + rows - r), y, in_place, stats.data());
}

// Z(rows x nc) = X(rows x K) · op(W)[:, c0 : c0 + nc] + bias[c0 : c0 + nc] (bias nullptr: none), W (C, K) when
// trans_b, else (K, C); wf is float32. `blas` (nullptr: Eigen) is read once per GEMM so every tile of one call uses
// the same library. The bias is written into Z first and the GEMM accumulates onto it (beta = 1): with beta = 0
// OpenBLAS zeroes Z before the product (a memset of the tile), so the bias costs no pass of its own.
void gemm_block(SgemmFn blas, const float* xf, int64_t rows, int64_t K, const float* wf, int64_t C, bool trans_b,
                const float* bias, int64_t c0, int64_t nc, float* z, int64_t ldz) {
  if (bias)
    for (int64_t r = 0; r < rows; ++r) std::copy_n(bias + c0, nc, z + r * ldz);
  if (K == 0) {  // X·W is zero; CBLAS requires leading dimensions >= 1 and some BLAS reject K = 0 without writing C
    if (!bias)
      for (int64_t r = 0; r < rows; ++r) std::fill_n(z + r * ldz, nc, 0.0f);
    return;
  }
  if (blas) {  // row-major CBLAS: 101; A not transposed 111; B transposed 112 (W is C x K) or not 111 (K x C)
    blas(101, 111, trans_b ? 112 : 111, static_cast<int>(rows), static_cast<int>(nc), static_cast<int>(K), 1.0f, xf,
         static_cast<int>(K), trans_b ? wf + c0 * K : wf + c0, static_cast<int>(trans_b ? K : C), bias ? 1.0f : 0.0f,
         z, static_cast<int>(ldz));
    return;
  }
  Eigen::Map<const RowMat> X(xf, rows, K);
  Eigen::Map<RowMat, 0, Eigen::OuterStride<>> Z(z, rows, nc, Eigen::OuterStride<>(ldz));
  if (trans_b) {
    Eigen::Map<const RowMat> W(wf + c0 * K, nc, K);
    if (bias)
      Z.noalias() += X * W.transpose();
    else
      Z.noalias() = X * W.transpose();
  } else {
    Eigen::Map<const RowMat, 0, Eigen::OuterStride<>> W(wf + c0, K, nc, Eigen::OuterStride<>(C));
    if (bias)
      Z.noalias() += X * W;
    else
      Z.noalias() = X * W;
  }
}

// A float32 copy of n elements of a 16-bit tensor, converted in parallel.
std::vector<float> to_f32(const void* src, int32_t dtype, int64_t n, int T) {
  std::vector<float> out(n);
  const int64_t blk = std::max<int64_t>(1, (n + 4 * T - 1) / (4 * T));
  parallel_for((n + blk - 1) / blk, n, [&](int64_t t) {
    const int64_t o = t * blk;
    load_f32(src, dtype, o, std::min(blk, n - o), out.data() + o);
  });
  return out;
}

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const char *pa = static_cast<const char*>(a), *pb = static_cast<const char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

void gemm_groupnorm(const fusedops_gemm_desc& gd, const void* x, const void* w, const ChannelParams& p, void* y) {
  const fusedops_groupnorm_desc& d = gd.gn;
  const int64_t M = d.N, C = d.C, K = gd.K;
  const int T = num_threads();
  const bool f32 = d.x_dtype == FUSEDOPS_F32;
  // 16-bit W / X: one conversion to float32, then the float32 GEMM (float32 accumulation either way).
  std::vector<float> wconv, xconv;
  if (!f32) wconv = to_f32(w, d.x_dtype, C * K, T);
  const float* wf = f32 ? static_cast<const float*>(w) : wconv.data();
  if (!f32) xconv = to_f32(x, d.x_dtype, M * K, T);
  const float* xf = f32 ? static_cast<const float*>(x) : xconv.data();
  const bool trans_b = gd.trans_b != 0;
  const float* bias = p.bias.empty() ? nullptr : p.bias.data();  // optional in the ABI (NULL = none)
  // The BLAS takes int dimensions; leading dimensions are at most max(K, C).
  const SgemmFn blas = std::max({M, C, K}) <= kBlasMaxDim ? blas_sgemm() : nullptr;
  // float32 Y without a reduction is Z itself, unless Y overlaps X or W (a caller running in place): row tiles
  // write their Y rows while other tiles still read X.
  const bool in_place = f32 && d.reduce == FUSEDOPS_REDUCE_NONE && !overlaps(y, M * C * 4, x, M * K * 4) &&
                        !overlaps(y, M * C * 4, w, C * K * 4);
  std::unique_ptr<float[]> zbuf;
  if (!in_place) zbuf.reset(new float[static_cast<size_t>(M * C)]);  // uninitialised: every tile writes its part
  float* z = in_place ? static_cast<float*>(y) : zbuf.get();

  // Tiles. Each tile's GEMM packs its X rows and W columns, so the tiling decides the repacking traffic: W (C·K) is
  // repacked once per row block and X (M·K) once per column block. Split columns first when W is the larger operand,
  // rows otherwise, the other only when there are too few blocks; about two tiles per thread keep the dynamic
  // schedule balanced when other processes share the cores. A tiny problem is one tile (no thread wake-ups).
  const int64_t want_tiles = M * C * K < (1 << 18) || T == 1 ? 1 : 2 * static_cast<int64_t>(T);
  const int64_t max_tn = std::max<int64_t>(1, C / 64), max_tm = std::max<int64_t>(1, M / 8);
  int64_t tn, tm;
  if (C >= M) {  // W (C·K) is at least as large as X (M·K)
    tn = std::min(want_tiles, max_tn);
    tm = std::min((want_tiles + tn - 1) / tn, max_tm);
  } else {
    tm = std::min(want_tiles, max_tm);
    tn = std::min((want_tiles + tm - 1) / tm, max_tn);
    // Every row tile repacks all of W (OpenBLAS, 1024 x 512 x 512 on one thread: one call 4.8 ms, two row halves
    // 5.0, four quarters 5.2): beyond one per thread, no balancing tiles shorter than kMinTileRows.
    if (tn == 1 && tm > T && M / tm < kMinTileRows) tm = std::max<int64_t>(T, M / kMinTileRows);
  }
  int64_t cb = (C + tn - 1) / tn;
  cb = std::min(C, (cb + 15) / 16 * 16);
  tn = (C + cb - 1) / cb;
  const int64_t rb = (M + tm - 1) / tm;
  tm = (M + rb - 1) / rb;
  if (tn == 1) {  // row tiles span all of C: each task's epilogue follows its GEMM while its rows are warm
    auto task = [&](int64_t t) {
      const int64_t r0 = t * rb, rows = std::min(rb, M - r0);
      gemm_block(blas, xf + r0 * K, rows, K, wf, C, trans_b, bias, 0, C, z + r0 * C, C);
      epilogue_rows(d, p, z, r0, rows, y, in_place);
    };
    if (tm == 1)
      task(0);
    else
      parallel_for(tm, task);
    return;
  }
  parallel_for(tm * tn, [&](int64_t t) {
    const int64_t r0 = (t / tn) * rb, c0 = (t % tn) * cb;
    const int64_t rows = std::min(rb, M - r0), nc = std::min(cb, C - c0);
    gemm_block(blas, xf + r0 * K, rows, K, wf, C, trans_b, bias, c0, nc, z + r0 * C + c0, C);
  });
  // The epilogue needs whole rows (groups and the channel reduction span all of C).
  const int64_t eb = std::max<int64_t>(1, std::min<int64_t>(64, M / (4 * T)));
  parallel_for((M + eb - 1) / eb, M * C, [&](int64_t t) {
    const int64_t r0 = t * eb;
    epilogue_rows(d, p, z, r0, std::min(eb, M - r0), y, in_place);
  });
}

}  // namespace cpu
}  // namespace fusedops
