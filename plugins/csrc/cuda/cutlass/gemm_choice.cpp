// The planner's GEMM choice for GemmGroupNormAct (see gemm_choice.h) and its C ABI form.
#include "cuda/cutlass/gemm_choice.h"

#include <stdio.h>

#include <algorithm>

#include "core/message.h"

namespace fusedops {
namespace gemm_choice {

namespace {

// THE switch for float32 with allow_tf32 = 0 (PyTorch's matmul precision "highest"): false keeps cuBLASLt's strict
// FP32 GEMM, true runs the CUTLASS 3xTF32 kernel. True since 2026-11-27 (H200, tools/cutlass_bench.py accuracy,
// docs/kernels.md): with fresh accumulators per k-tile, 3xTF32's error against float64 is 0.17-0.46 x eager FP32's
// on every well-conditioned case (was 4-17 x), and it runs in 1.62-1.66 ms where cuBLASLt's strict GEMM takes 2.7.
constexpr bool kFloat32Uses3xTf32 = true;

// THE switch for automatic plans at TF32 / 16-bit. False, measured (H200, 2026-11-23 and -26, docs/kernels.md): the
// CUTLASS kernel is correct but 1.04-1.3x (TF32) and 1.1-1.75x (BF16 / FP16) the time of cuBLASLt + the GroupNorm
// epilogue, so there it runs only when the plan options force it (gemm_kernel = 2); where it would apply the reason
// says so. Strict float32's 3xTF32 follows kFloat32Uses3xTf32 alone.
constexpr bool kCutlassAutomatic = false;

// The skinny kernel in automatic plans, up to the rows where it measured faster than cuBLASLt (H200, 2026-11-23,
// tools/skinny_bench.py, W 8192 x 8192; docs/kernels.md): float32 0.59-0.86x up to 8 rows (TF32 and strict), 1.9x
// at 16; float16 0.90-0.96x up to 4 rows; bfloat16 never (cuBLASLt already streams W at 3.5 TB/s: 1.06x).
constexpr bool kSkinnyAutomatic = true;
int64_t skinny_auto_rows(int32_t dtype) { return dtype == FUSEDOPS_F32 ? 8 : dtype == FUSEDOPS_F16 ? 4 : 0; }

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::TF32: return "tf32";
    case Mode::BF16: return "bf16";
    case Mode::FP16: return "fp16";
    default: return "3xtf32";
  }
}

// Both kernels load X and W rows as 16-byte vectors: why K does not allow it ("" when it does).
std::string rows_not_16_byte_vectors(const fusedops_op_desc& d) {
  const int64_t elem = d.d.gn.x_dtype == FUSEDOPS_F32 ? 4 : 2;
  if ((d.d.K * elem) % 16 == 0) return "";
  char buf[96];
  snprintf(buf, sizeof buf, "K = %lld: rows of X and W are not a multiple of 16 bytes", (long long)d.d.K);
  return buf;
}

// Why the CUTLASS kernel cannot run `d` here ("" when it can), for the chosen mode and configuration.
std::string cutlass_blocker(const fusedops_op_desc& d, const fusedops_gemm_device& dev, bool strict_fp32, bool three,
                            Mode mode, int config) {
  const fusedops_groupnorm_desc& gn = d.d.gn;
  char buf[256];
  if (!dev.has_cutlass) return "this library was built without the CUTLASS kernels";
  if (dev.cc_major != 9 || dev.cc_minor != 0) {
    snprintf(buf, sizeof buf, "the CUTLASS kernels are built for sm_90a (H100/H200); this device is sm_%d%d",
             dev.cc_major, dev.cc_minor);
    return buf;
  }
  if (strict_fp32 && !three) return "strict FP32 (allow_tf32 = 0) runs on cuBLASLt while 3xTF32 is off";
  if (config < 0 || config >= config_count(mode)) {
    snprintf(buf, sizeof buf, "cutlass_config %d: this precision has configurations 1..%d", config + 1,
             config_count(mode));
    return buf;
  }
  if (d.d.K == 0) return "K = 0 (no GEMM to run)";
  if (d.d.trans_b != 1) return "W is (K, C) (trans_b = 0); the CUTLASS kernels take the Linear layout (C, K)";
  const std::string rows = rows_not_16_byte_vectors(d);
  if (!rows.empty()) return rows + " (TMA)";
  if (gn.N > INT32_MAX || gn.C > INT32_MAX || d.d.K > INT32_MAX) return "M, C or K exceeds 2^31 - 1";
  if (gn.C % 2 != 0) return "C is odd (the epilogue stores channel pairs)";
  const int64_t cg = gn.C / gn.num_groups;
  if (!(cg == 1 || cg == 2 || cg == 4 || cg % 8 == 0)) {
    snprintf(buf, sizeof buf, "groups of %lld channels (the epilogue takes 1, 2, 4 or a multiple of 8)",
             (long long)cg);
    return buf;
  }
  const int tile_n = config_of(mode, config).tile_n;
  if (tile_n % cg != 0) {
    snprintf(buf, sizeof buf, "groups of %lld channels do not fit the %d-channel tile", (long long)cg, tile_n);
    return buf;
  }
  return "";
}

// Why the skinny kernel cannot run `d` ("" when it can).
std::string skinny_blocker(const fusedops_op_desc& d, bool three) {
  const fusedops_groupnorm_desc& gn = d.d.gn;
  char buf[200];
  if (three) return "3xTF32 (fp32_gemm = 2) runs only in the CUTLASS kernel";
  if (gn.N < 1 || gn.N > kSkinnyMaxRows) {
    snprintf(buf, sizeof buf, "M = %lld rows (it takes 1..%lld)", (long long)gn.N, (long long)kSkinnyMaxRows);
    return buf;
  }
  if (d.d.K == 0) return "K = 0 (no GEMM to run)";
  if (d.d.trans_b != 1) return "W is (K, C) (trans_b = 0); the skinny kernel streams rows of W stored (C, K)";
  const std::string rows = rows_not_16_byte_vectors(d);
  if (!rows.empty()) return rows;
  if (gn.C > INT32_MAX || d.d.K > INT32_MAX) return "C or K exceeds 2^31 - 1";
  return "";
}

}  // namespace

int choose(const fusedops_op_desc& d, const fusedops_gemm_device& dev, const fusedops_plan_options& o, Choice* out,
           char* err, size_t err_len) {
  using core::set_message;
  if (d.op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "the GEMM choice is for GemmGroupNormAct only");
  const fusedops_groupnorm_desc& gn = d.d.gn;
  if (gn.N < 0 || gn.C <= 0 || d.d.K < 0 || gn.num_groups <= 0 || gn.C % gn.num_groups != 0 || gn.x_dtype < 0 ||
      gn.x_dtype > FUSEDOPS_BF16)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "GemmGroupNormAct: incomplete or invalid descriptor (M=%lld C=%lld K=%lld groups=%d dtype %d)",
                       (long long)gn.N, (long long)gn.C, (long long)d.d.K, gn.num_groups, gn.x_dtype);
  if (o.gemm_kernel < FUSEDOPS_GEMM_AUTO || o.gemm_kernel > FUSEDOPS_GEMM_SKINNY)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "gemm_kernel %d is not 0 (auto), 1 (cuBLASLt), 2 (CUTLASS) or 3 (skinny)", o.gemm_kernel);
  if (o.fp32_gemm < 0 || o.fp32_gemm > 2)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                       "fp32_gemm %d is not 0 (auto), 1 (strict FP32) or 2 (3xTF32)", o.fp32_gemm);
  if (o.cutlass_config < 0)
    return set_message(err, err_len, FUSEDOPS_ERR_INVALID_ARGUMENT, "cutlass_config %d is negative",
                       o.cutlass_config);

  const bool strict_fp32 = gn.x_dtype == FUSEDOPS_F32 && !d.d.allow_tf32;
  const bool three_asked = strict_fp32 && o.fp32_gemm == 2;  // an explicit request: no other kernel will do
  const bool three = three_asked || (strict_fp32 && o.fp32_gemm == 0 && kFloat32Uses3xTf32);
  Choice c;
  c.mode = gn.x_dtype == FUSEDOPS_BF16 ? Mode::BF16
           : gn.x_dtype == FUSEDOPS_F16 ? Mode::FP16
           : three                      ? Mode::THREE_TF32
                                        : Mode::TF32;
  c.config = o.cutlass_config > 0 ? o.cutlass_config - 1 : 0;

  if (o.gemm_kernel == FUSEDOPS_GEMM_CUBLASLT) {
    if (three_asked)
      return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                         "GemmGroupNormAct: 3xTF32 (fp32_gemm = 2) runs only in the CUTLASS kernel, and gemm_kernel "
                         "forces cuBLASLt");
    c.kernel = FUSEDOPS_GEMM_CUBLASLT;
    c.why = "cuBLASLt: forced by the plan options";
    *out = c;
    return FUSEDOPS_OK;
  }
  // Only an explicit fp32_gemm = 2 keeps strict float32 off the skinny kernel: the switch's default gives way to
  // it (and to a forced cuBLASLt), which run strict FP32 where the CUTLASS kernel does not.
  const std::string skinny = skinny_blocker(d, three_asked);
  if (o.gemm_kernel == FUSEDOPS_GEMM_SKINNY) {
    if (!skinny.empty())
      return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED, "GemmGroupNormAct: the skinny kernel is forced: %s",
                         skinny.c_str());
    c.kernel = FUSEDOPS_GEMM_SKINNY;
    c.why = "skinny: forced by the plan options";
    *out = c;
    return FUSEDOPS_OK;
  }
  const std::string blocker = cutlass_blocker(d, dev, strict_fp32, three, c.mode, c.config);
  if (o.gemm_kernel == FUSEDOPS_GEMM_CUTLASS || three_asked) {
    if (!blocker.empty())
      return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED, "GemmGroupNormAct: the CUTLASS kernel %s: %s",
                         o.gemm_kernel == FUSEDOPS_GEMM_CUTLASS ? "is forced" : "(3xTF32) is forced",
                         blocker.c_str());
    c.kernel = FUSEDOPS_GEMM_CUTLASS;
    c.why = std::string("CUTLASS ") + mode_name(c.mode) + " " + config_of(c.mode, c.config).name + ": forced by the plan options";
    *out = c;
    return FUSEDOPS_OK;
  }
  if (kSkinnyAutomatic && o.fp32_gemm != 2 && skinny.empty() && gn.N <= skinny_auto_rows(gn.x_dtype)) {
    char buf[160];
    snprintf(buf, sizeof buf, "skinny: %lld rows, the GEMM is a read of W", (long long)gn.N);
    c.kernel = FUSEDOPS_GEMM_SKINNY;
    c.why = buf;
    *out = c;
    return FUSEDOPS_OK;
  }
  if (!blocker.empty()) {
    c.kernel = FUSEDOPS_GEMM_CUBLASLT;
    c.why = "cuBLASLt: " + blocker;
    *out = c;
    return FUSEDOPS_OK;
  }
  // Without split-K the CUTLASS kernel runs one CTA a tile: fewer tiles than SMs leave the GPU partly idle where
  // cuBLASLt splits K (e.g. batch 64 of the reference models gives 32 tiles for 132 SMs).
  const TileConfig& t = config_of(c.mode, c.config);
  const int64_t cta_m = t.pingpong ? 2 * t.tile_m : t.tile_m;
  const int64_t tiles = ((gn.N + cta_m - 1) / cta_m) * ((gn.C + t.tile_n - 1) / t.tile_n);
  if (tiles < dev.sm_count) {
    char buf[160];
    snprintf(buf, sizeof buf, "cuBLASLt: %lld output tiles of %lldx%d are fewer than the %d SMs", (long long)tiles,
             (long long)cta_m, t.tile_n, dev.sm_count);
    c.kernel = FUSEDOPS_GEMM_CUBLASLT;
    c.why = buf;
    *out = c;
    return FUSEDOPS_OK;
  }
  const std::string applies = std::string("CUTLASS ") + mode_name(c.mode) + " " + t.name + ": sm_90, groups of " +
                              std::to_string(gn.C / gn.num_groups) + " channels inside the " +
                              std::to_string(t.tile_n) + "-channel tile";
  if (!kCutlassAutomatic && c.mode != Mode::THREE_TF32) {
    c.kernel = FUSEDOPS_GEMM_CUBLASLT;
    c.why = "cuBLASLt: " + applies + " would apply, but at TF32 / 16-bit it is held back (slower than cuBLASLt + the " +
            "GroupNorm epilogue; gemm_kernel = 2 forces it)";
    *out = c;
    return FUSEDOPS_OK;
  }
  c.kernel = FUSEDOPS_GEMM_CUTLASS;
  c.why = applies;
  *out = c;
  return FUSEDOPS_OK;
}

size_t cutlass_workspace_bound(const fusedops_op_desc& d) {
  const fusedops_groupnorm_desc& gn = d.d.gn;
  if (d.op != FUSEDOPS_OP_GEMM_GROUPNORM_ACT || gn.reduce == FUSEDOPS_REDUCE_NONE || gn.N <= 0 || gn.C <= 0) return 0;
  int narrowest = 1 << 30;
  for (int m = 0; m < kModes; ++m)
    for (int i = 0; i < config_count(Mode(m)); ++i) narrowest = std::min(narrowest, config_of(Mode(m), i).tile_n);
  const size_t tiles_n = size_t((gn.C + narrowest - 1) / narrowest);
  return 256 /* alignment of the caller's pointer */ + tiles_n * size_t(gn.N) * 8 /* RedState */;
}

}  // namespace gemm_choice
}  // namespace fusedops

extern "C" {

FUSEDOPS_API int fusedops_gemm_kernel_choice(const fusedops_op_desc* d, const fusedops_gemm_device* dev,
                                             const fusedops_plan_options* options, int32_t* kernel, char* why,
                                             size_t why_len) {
  if (!d || !dev || !kernel)
    return fusedops::core::set_message(why, why_len, FUSEDOPS_ERR_INVALID_ARGUMENT,
                                       "descriptor, device or output is NULL");
  fusedops_plan_options o{};
  if (options) o = *options;
  fusedops::gemm_choice::Choice c;
  const int rc = fusedops::gemm_choice::choose(*d, *dev, o, &c, why, why_len);
  if (rc != FUSEDOPS_OK) return rc;
  *kernel = c.kernel;
  return fusedops::core::set_message(why, why_len, FUSEDOPS_OK, "%s", c.why.c_str());
}

FUSEDOPS_API int fusedops_has_cutlass(void) {
#if defined(FUSEDOPS_WITH_CUTLASS)
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
