// ConvTransposeGroupNormAct on the CPU (issue 13): the transposed convolution as GEMMs (the project's CPU GEMM: a
// run-time BLAS, Eigen otherwise) plus a scatter into the output (col2im), bias added, then the GroupNormAct kernel
// over the result, in place when there is no channel reduction (it reads every element of a range before writing
// it). One task per (sample, convolution group, chunk of output channels): tasks write disjoint channels, so the
// scatter needs no atomics. float32 accumulation for every dtype; 16-bit results are rounded once, before GroupNorm,
// as PyTorch's own 16-bit transposed convolution rounds its output.
#include "core/cpu_convt.h"

#include <Eigen/Core>

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "core/conv_rules.h"
#include "core/cpu_blas.h"
#include "core/cpu_util.h"
#include "core/message.h"

namespace fusedops {
namespace cpu {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int64_t kChannelChunk = 16;      // output channels a task computes
constexpr int64_t kColumnFloats = 1 << 20; // floats of a task's column buffer (4 MiB): sets the input rows a GEMM takes

// C (m x n, row stride ldc) = A (m x k) · B (k x n, row stride ldb), float32.
void gemm(SgemmFn blas, const float* a, const float* b, int64_t ldb, float* c, int64_t m, int64_t n, int64_t k) {
  if (blas && k > 0) {
    blas(101, 111, 111, int(m), int(n), int(k), 1.0f, a, int(k), b, int(ldb), 0.0f, c, int(n));
    return;
  }
  Eigen::Map<const RowMat> A(a, m, k);
  Eigen::Map<const RowMat, 0, Eigen::OuterStride<>> B(b, k, n, Eigen::OuterStride<>(ldb));
  Eigen::Map<RowMat> Cm(c, m, n);
  Cm.noalias() = A * B;
}

}  // namespace

int convt_groupnorm_act_cpu(const fusedops_op_desc& d, const void* const* in, int32_t num_inputs, void* y, char* err,
                            size_t err_len) {
  const fusedops_groupnorm_desc& gn = d.d.gn;
  const fusedops_conv_desc& cv = d.conv;
  const core::ConvGeometry g = core::conv_geometry(cv);
  const int64_t N = gn.N, C = gn.C, S = gn.S, groups = cv.group, cin_g = cv.in_channels / groups;
  const int64_t cout_g = C / groups, taps = g.kh * g.kw, in_plane = g.hin * g.win;
  const int32_t xt = gn.x_dtype;
  const int64_t elem = xt == FUSEDOPS_F32 ? 4 : 2;
  try {
    // The convolution's output: Y itself, or (with a channel reduction, Y being (N, 1, S)) a buffer of X's dtype.
    std::vector<unsigned char> conv_buffer;
    void* conv_out = y;
    if (gn.reduce != FUSEDOPS_REDUCE_NONE) {
      conv_buffer.resize(size_t(N * C * S * elem));
      conv_out = conv_buffer.data();
    }
    std::vector<float> wf(size_t(cv.in_channels * cout_g * taps)), bias(size_t(C), 0.0f);
    load_f32(in[1], xt, 0, int64_t(wf.size()), wf.data());
    if (in[2]) load_f32(in[2], gn.param_dtype, 0, C, bias.data());
    const SgemmFn blas = blas_sgemm();  // one library for every task of this call
    const int64_t chunks = (cout_g + kChannelChunk - 1) / kChannelChunk;
    const int64_t rows_per_gemm = std::max<int64_t>(1, kColumnFloats / std::max<int64_t>(1, kChannelChunk * taps * g.win));
    parallel_for(N * groups * chunks, N * C * S * cin_g * taps / std::max<int64_t>(1, g.sh * g.sw), [&](int64_t t) {
      const int64_t n = t / (groups * chunks), cg = (t / chunks) % groups, co0 = (t % chunks) * kChannelChunk;
      const int64_t nco = std::min(kChannelChunk, cout_g - co0);
      thread_local std::vector<float> xbuf, a, cols, acc;
      a.resize(size_t(nco * taps * cin_g));
      acc.resize(size_t(nco * S));
      // float32 X is read in place; 16-bit X is widened once per task.
      const int64_t x_at = (n * cv.in_channels + cg * cin_g) * in_plane;
      const float* xf = xt == FUSEDOPS_F32 ? static_cast<const float*>(in[0]) + x_at : nullptr;
      if (!xf) {
        xbuf.resize(size_t(cin_g * in_plane));
        load_f32(in[0], xt, x_at, cin_g * in_plane, xbuf.data());
        xf = xbuf.data();
      }
      // A (nco * taps x cin_g): row (co, tap) holds W[cg * cin_g + ci, co0 + co, tap] over ci.
      for (int64_t co = 0; co < nco; ++co)
        for (int64_t tap = 0; tap < taps; ++tap)
          for (int64_t ci = 0; ci < cin_g; ++ci)
            a[size_t((co * taps + tap) * cin_g + ci)] = wf[size_t(((cg * cin_g + ci) * cout_g + co0 + co) * taps + tap)];
      for (int64_t co = 0; co < nco; ++co)
        std::fill_n(acc.data() + co * S, S, bias[size_t(cg * cout_g + co0 + co)]);
      for (int64_t ih0 = 0; ih0 < g.hin; ih0 += rows_per_gemm) {
        const int64_t rows = std::min(rows_per_gemm, g.hin - ih0), cols_n = rows * g.win;
        cols.resize(size_t(nco * taps * cols_n));
        gemm(blas, a.data(), xf + ih0 * g.win, in_plane, cols.data(), nco * taps, cols_n, cin_g);
        // Scatter (col2im): input (ih, iw) through tap (kh, kw) lands on (ih*sh - ph + kh*dh, iw*sw - pw + kw*dw).
        for (int64_t co = 0; co < nco; ++co)
          for (int64_t kh = 0; kh < g.kh; ++kh)
            for (int64_t kw = 0; kw < g.kw; ++kw) {
              const float* src = cols.data() + ((co * taps + kh * g.kw + kw) * cols_n);
              float* dst = acc.data() + co * S;
              for (int64_t r = 0; r < rows; ++r) {
                const int64_t oh = (ih0 + r) * g.sh - g.ph + kh * g.dh;
                if (oh < 0 || oh >= g.hout) continue;
                const float* srow = src + r * g.win;
                float* drow = dst + oh * g.wout;
                if (g.sw == 1) {  // a contiguous run of columns: a loop the compiler vectorises
                  const int64_t shift = kw * g.dw - g.pw;  // ow = iw + shift
                  const int64_t lo = std::max<int64_t>(0, -shift), hi = std::min<int64_t>(g.win, g.wout - shift);
                  for (int64_t iw = lo; iw < hi; ++iw) drow[iw + shift] += srow[iw];
                  continue;
                }
                for (int64_t iw = 0; iw < g.win; ++iw) {
                  const int64_t ow = iw * g.sw - g.pw + kw * g.dw;
                  if (ow >= 0 && ow < g.wout) drow[ow] += srow[iw];
                }
              }
            }
      }
      store_from_f32(acc.data(), nco * S, conv_out, xt, (n * C + cg * cout_g + co0) * S);
    });
    return fusedops_groupnorm_act_cpu(&gn, conv_out, in[3], in[4], in + 5, num_inputs - 5, y, err, err_len);
  } catch (const std::bad_alloc&) {
    core::set_err(err, err_len, "ConvTransposeGroupNormAct: out of host memory");
    return FUSEDOPS_ERR_INVALID_ARGUMENT;
  }
}

}  // namespace cpu
}  // namespace fusedops
