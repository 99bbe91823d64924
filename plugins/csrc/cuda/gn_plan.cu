// GroupNorm launch plans: every choice the kernels need (instantiation, grid, block, shared memory, occupancy-based
// tiling, the one-pass kernel's deadlock-freedom check, kernel attributes) is made once per plan; a run copies the
// parameter block, fills in the call's pointers and enqueues. Kernels: gn_kernels.cuh; launch shapes and
// measurements: docs/kernels.md.
#include <stdarg.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "core/message.h"
#include "cuda/device_query.h"
#include "cuda/gn_kernels.cuh"

namespace fusedops {
namespace cuda {

namespace {

// How a step passes its arguments (the kernels' signatures).
enum class Args : uint8_t { P, P_TICKETS, P_GROUPS, P_LPG_SLICES, P_LPG_SLICES_ROWS };

struct GnStep {
  bool memset_counters = false;  // zero the one-pass arrival counters and ticket (groups + 1 unsigned)
  const void* func = nullptr;
  Args args = Args::P;
  dim3 grid, block;
  size_t smem = 0;
  int lpg = 0, slices = 0, rows = 0;
  uint32_t tickets = 0;
  int64_t groups = 0;        // gn_finalize_kernel's count; the memset's counter count
  int64_t group_offset = 0;  // first group of a wave
  unsigned cluster = 1;      // > 1: launched as thread-block clusters of this many blocks along x
};

// One way to run the op, valid for pointers aligned as stated. Variants are tried in order of preference.
struct GnVariant {
  size_t io_align = 1;     // bytes X and Y must be aligned to
  size_t param_align = 1;  // bytes gamma, beta, bias and the extras must be aligned to
  bool onepass = false;    // workspace layout of the one-pass kernel
  int64_t chunk = 0, P = 1;
  FastDiv div_sv{1, 0, 0};  // group-relative vector index -> channel offset (divides by S / VEC)
  std::vector<GnStep> steps;
  std::string text;
};

bool aligned(const void* ptr, size_t bytes) { return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }
bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Rows a block of the column-slice epilogue walks: enough to amortise the parameter loads while keeping about one
// full wave of blocks on the device. Rounded up, so the blocks fit in one wave: rounding down gave model 2's
// whole-row reduction 147 blocks of 7 rows for 132 resident slots (two waves, 62 us) where 128 blocks of 8 take
// 37 us (H200, 2026-11-23). At most kTileDefaultRows, but up to kTileMaxRows where that makes a launch without
// clusters one wave: bf16 epilogues of models 1 / 3 (4 slices, 3 blocks an SM) ran 1.29 waves of 8 rows in 28.8 / 36.4
// us, one wave of 11 rows in 24.7 / 31.8 (H200, 2026-11-27, tools/kernel_bench.py rows). Cluster launches (model 2's
// reduction) keep 8: their sweep was erratic (bf16 11 rows 44.4 us, 12 rows 31.9; fp32 16 rows 44.3, 8 rows 39.2).
int tile_rows(int64_t N, int64_t slices, int64_t threads, const void* kernel, const DeviceInfo& dev, int forced,
              bool clusters) {
  if (forced >= 1) return std::min(forced, kTileMaxRows);
  int per_sm = blocks_per_sm(kernel, int(threads), 0);
  if (per_sm <= 0) per_sm = int(std::max<int64_t>(1, 2048 / threads));
  const int64_t resident = int64_t(dev.sms) * per_sm;
  const int64_t one_wave = ceil_div(N * slices, resident);
  const int64_t cap = !clusters && one_wave <= kTileMaxRows ? kTileMaxRows : kTileDefaultRows;
  return int(std::max<int64_t>(1, std::min<int64_t>(cap, one_wave)));
}

// Groups per wave of the two-pass split (l2_wave_fraction > 0 only). Measured on H200 (docs/kernels.md): waves sized
// to a fraction of L2 made model 4 slower (1.67 -> 2.12-2.62 ms), so production plans use one launch.
int64_t wave_groups(const GnPlan& plan, const fusedops_groupnorm_desc& d, int64_t groups, float fraction,
                    const DeviceInfo& dev) {
  if (fraction <= 0.f || dev.l2 <= 0) return groups;
  const double group_bytes = double(plan.group_len) * double(elem_size(d.x_dtype));
  int64_t wave = int64_t(double(fraction) * double(dev.l2) / group_bytes);
  wave = std::max<int64_t>(wave, ceil_div(int64_t(dev.sms) * 4, plan.chunks));
  return std::max<int64_t>(1, std::min(wave, groups));
}

GnStep launch_step(const void* func, Args args, dim3 grid, dim3 block, size_t smem = 0) {
  GnStep s;
  s.func = func;
  s.args = args;
  s.grid = grid;
  s.block = block;
  s.smem = smem;
  return s;
}

cudaError_t launch_clusters(const GnStep& s, void** args, cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = s.grid;
  cfg.blockDim = s.block;
  cfg.dynamicSmemBytes = s.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = s.cluster;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelExC(&cfg, s.func, args);
}

// The pre chain's specialisation on the split paths (vector widths have it; the scalar path interprets any chain).
template <typename T, int VEC, int MODE>
const void* group_kernel_pre(int pre_kind) {
  switch (pre_kind) {
    case PRE_NONE: return reinterpret_cast<const void*>(gn_group_kernel<T, VEC, MODE, PRE_NONE>);
    case PRE_GELU: return reinterpret_cast<const void*>(gn_group_kernel<T, VEC, MODE, PRE_GELU>);
    case PRE_GELU_FAST: return reinterpret_cast<const void*>(gn_group_kernel<T, VEC, MODE, PRE_GELU_FAST>);
    default: return reinterpret_cast<const void*>(gn_group_kernel<T, VEC, MODE, PRE_CHAIN>);
  }
}
template <typename T, int MODE>
const void* group_kernel(int vec_n, int pre_kind) {
  constexpr int kVec = 16 / sizeof(T);
  if (vec_n == kVec) return group_kernel_pre<T, kVec, MODE>(pre_kind);
  if (vec_n == kVec / 2) return group_kernel_pre<T, kVec / 2, MODE>(pre_kind);
  return reinterpret_cast<const void*>(gn_group_kernel<T, 1, MODE, PRE_CHAIN>);
}
template <typename T, int VEC>
const void* onepass_kernel_pre(int pre_kind) {
  switch (pre_kind) {
    case PRE_NONE: return reinterpret_cast<const void*>(gn_onepass_kernel<T, VEC, PRE_NONE>);
    case PRE_GELU: return reinterpret_cast<const void*>(gn_onepass_kernel<T, VEC, PRE_GELU>);
    case PRE_GELU_FAST: return reinterpret_cast<const void*>(gn_onepass_kernel<T, VEC, PRE_GELU_FAST>);
    default: return reinterpret_cast<const void*>(gn_onepass_kernel<T, VEC, PRE_CHAIN>);
  }
}
template <typename T>
const void* onepass_kernel(int vec_n, int pre_kind) {
  constexpr int kVec = 16 / sizeof(T);
  if (vec_n == kVec) return onepass_kernel_pre<T, kVec>(pre_kind);
  if (vec_n == kVec / 2) return onepass_kernel_pre<T, kVec / 2>(pre_kind);
  return reinterpret_cast<const void*>(gn_onepass_kernel<T, 1, PRE_CHAIN>);
}

template <typename T, int VEC, int KV>
const void* tile_kernel(bool one_extra, bool whole_row) {
  if (!whole_row)
    return one_extra ? reinterpret_cast<const void*>(gn_row_tile_kernel<T, VEC, KV, 1, 256>)
                     : reinterpret_cast<const void*>(gn_row_tile_kernel<T, VEC, KV, 0, 256>);
  return one_extra ? reinterpret_cast<const void*>(gn_row_tile_kernel<T, VEC, KV, 1, 512>)
                   : reinterpret_cast<const void*>(gn_row_tile_kernel<T, VEC, KV, 0, 512>);
}

const char* vec_text(int vec_n) { return vec_n == 1 ? "scalar" : vec_n == 2 ? "vec2" : vec_n == 4 ? "vec4" : "vec8"; }

std::string format(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// S == 1: one row per sample. `vec`: 16-byte vectors (the variant then needs aligned pointers).
template <typename T>
GnVariant plan_row(const fusedops_groupnorm_desc& d, const GnPlan& plan, bool vec, const fusedops_plan_options& o,
                   const DeviceInfo& dev) {
  constexpr int kVec = 16 / sizeof(T);
  const size_t pbytes = size_t(elem_size(d.param_dtype));
  GnVariant v;
  v.div_sv.init(1);
  v.io_align = vec ? 16 : sizeof(T);
  v.param_align = vec ? pbytes * kVec : pbytes;
  const int64_t Cg = d.C / d.num_groups;
  const int vec_n = vec ? kVec : 1;
  const int64_t lpg = Cg / vec_n, nvec_reg = d.C / vec_n;
  const bool reduce = d.reduce != FUSEDOPS_REDUCE_NONE;
  const bool pow2_groups = Cg % vec_n == 0 && lpg <= 32 && is_pow2(lpg);
  const int32_t nex = fusedops_num_extras(&d.pre, &d.post);
  // Column-slice kernel that walks several rows (the measured-fastest); the register kernel for more than one extra
  // input or when asked for.
  if (!o.epilogue_register && vec && pow2_groups && nex <= 1 && (!reduce || nvec_reg <= 4 * 512)) {
    // A channel reduction cuts its row into slices too where one cluster can combine them (sm_90, at most 8
    // slices), else it keeps the whole row in one block.
    bool whole_row = reduce && (o.reduce_whole_row || dev.cc_major < 9);
    int kv = 1;
    int64_t threads = 0, slices = 0;
    const void* kernel = nullptr;
    for (int attempt = 0; attempt < 2; ++attempt) {
      kv = !whole_row || nvec_reg <= 512 ? 1 : nvec_reg <= 1024 ? 2 : 4;
      const int64_t warps_needed = ceil_div(ceil_div(nvec_reg, kv), 32);
      threads = whole_row ? warps_needed * 32 : std::min<int64_t>(kRegSliceThreads, warps_needed * 32);
      slices = ceil_div(nvec_reg, threads * kv);
      kernel = kv == 1   ? tile_kernel<T, kVec, 1>(nex == 1, whole_row)
               : kv == 2 ? tile_kernel<T, kVec, 2>(nex == 1, whole_row)
                         : tile_kernel<T, kVec, 4>(nex == 1, whole_row);
      if (!reduce || whole_row || slices == 1 || fits_clusters(kernel, dev, int(slices), int(threads), 0)) break;
      whole_row = true;
    }
    const unsigned cluster = reduce && slices > 1 ? unsigned(slices) : 1u;
    const int rows = tile_rows(d.N, slices, threads, kernel, dev, o.epilogue_rows, cluster > 1);
    const int64_t blocks = ceil_div(d.N, rows) * slices;
    if (blocks <= INT32_MAX) {
      GnStep s = launch_step(kernel, Args::P_LPG_SLICES_ROWS, dim3(unsigned(blocks)), dim3(unsigned(threads)));
      s.lpg = int(lpg);
      s.slices = int(slices);
      s.rows = rows;
      s.cluster = cluster;
      v.steps.push_back(s);
      v.text = format("gn_row_tile(%s,kv=%d,rows=%d,slices=%lld%s)", vec_text(vec_n), kv, rows, (long long)slices,
                      cluster > 1 ? ",cluster" : "");
      return v;
    }
  }
  if (pow2_groups && (!reduce || nvec_reg <= int64_t(kRegMaxThreads) * kRegVecs)) {
    // A reduction needs the whole row in one block; otherwise slices of kRegSliceThreads threads.
    const int64_t warps_needed = ceil_div(ceil_div(nvec_reg, kRegVecs), 32);
    const int64_t threads = reduce ? warps_needed * 32 : std::min<int64_t>(kRegSliceThreads, warps_needed * 32);
    const int64_t slices = ceil_div(nvec_reg, threads * kRegVecs);
    if (d.N * slices <= INT32_MAX) {
      const void* kernel = vec ? reinterpret_cast<const void*>(gn_row_reg_kernel<T, kVec>)
                               : reinterpret_cast<const void*>(gn_row_reg_kernel<T, 1>);
      GnStep s = launch_step(kernel, Args::P_LPG_SLICES, dim3(unsigned(d.N * slices)), dim3(unsigned(threads)));
      s.lpg = int(lpg);
      s.slices = int(slices);
      v.steps.push_back(s);
      v.text = format("gn_row_reg(%s,slices=%lld)", vec_text(vec_n), (long long)slices);
      return v;
    }
  }
  const int64_t nvec = vec ? d.C / kVec : d.C;
  const int threads = int(std::min<int64_t>(512, std::max<int64_t>(32, ceil_div(ceil_div(nvec, 8), 32) * 32)));
  const void* kernel = vec ? reinterpret_cast<const void*>(gn_row_kernel<T, kVec>)
                           : reinterpret_cast<const void*>(gn_row_kernel<T, 1>);
  if (!allow_smem(kernel, plan.smem_bytes)) {
    v.text = "";  // unusable on this device
    return v;
  }
  v.steps.push_back(launch_step(kernel, Args::P, dim3(unsigned(d.N)), dim3(unsigned(threads)), plan.smem_bytes));
  v.text = format("gn_row(%s,smem=%zu)", vec_text(vec_n), plan.smem_bytes);
  return v;
}

// S > 1: groups of L = C/G*S contiguous elements, vectors of vec_n elements.
template <typename T>
GnVariant plan_split(const fusedops_groupnorm_desc& d, const GnPlan& plan, int vec_n, const fusedops_plan_options& o,
                     const DeviceInfo& dev) {
  GnVariant v;
  v.io_align = size_t(vec_n) * sizeof(T);
  v.param_align = size_t(elem_size(d.param_dtype));  // parameters are read one element at a time here
  v.div_sv.init(uint32_t(d.S / vec_n));
  v.chunk = plan.chunk;
  v.P = plan.chunks;
  const int64_t groups = d.N * d.num_groups;
  const int gelu_kind = o.gelu_erff ? PRE_GELU : PRE_GELU_FAST;
  const int pre_kind = d.pre.num_steps == 0                                                    ? PRE_NONE
                       : d.pre.num_steps == 1 && d.pre.steps[0].op == FUSEDOPS_STEP_GELU ? gelu_kind
                                                                                         : PRE_CHAIN;
  const char* pre_text = vec_n == 1                  ? "chain"
                         : pre_kind == PRE_NONE      ? "none"
                         : pre_kind == PRE_GELU      ? "gelu_erff"
                         : pre_kind == PRE_GELU_FAST ? "gelu_fast"
                                                     : "chain";
  const dim3 grid(unsigned(groups), unsigned(plan.chunks));
  if (plan.kind == GnPlan::FUSED) {
    const int threads =
        int(std::min<int64_t>(kBlock, std::max<int64_t>(32, ceil_div(ceil_div(plan.chunk / vec_n, 4), 32) * 32)));
    v.steps.push_back(launch_step(group_kernel<T, MODE_FUSED>(vec_n, pre_kind), Args::P, grid, dim3(threads)));
    v.text = format("gn_group_fused(%s,pre=%s)", vec_text(vec_n), pre_text);
    return v;
  }
  if (plan.kind == GnPlan::SPLIT_REDUCE) {
    v.steps.push_back(launch_step(group_kernel<T, MODE_STATS>(vec_n, pre_kind), Args::P, grid, dim3(kBlock)));
    GnStep fin = launch_step(reinterpret_cast<const void*>(gn_finalize_kernel), Args::P_GROUPS,
                             dim3(unsigned(ceil_div(groups, 256))), dim3(256));
    fin.groups = groups;
    v.steps.push_back(fin);
    v.steps.push_back(launch_step(reinterpret_cast<const void*>(gn_reduce_kernel<T>), Args::P,
                                  dim3(unsigned(ceil_div(d.S, kBlock) * d.N)), dim3(kBlock)));
    v.text = format("gn_stats(%s,P=%lld) + gn_finalize + gn_reduce", vec_text(vec_n), (long long)plan.chunks);
    return v;
  }
  // SPLIT: the one-pass kernel when the device keeps at least twice as many of its blocks resident as a group has
  // chunks (see gn_onepass_kernel: then its waits cannot deadlock), else the two-pass kernels.
  if (plan.onepass_chunks >= 1 && !o.groupnorm_two_pass) {
    const void* kernel = onepass_kernel<T>(vec_n, pre_kind);
    const size_t smem = size_t(plan.onepass_chunk) * sizeof(float);
    const int per_sm = allow_smem(kernel, smem) ? blocks_per_sm(kernel, kBlock, smem) : 0;
    const int64_t resident = int64_t(dev.sms) * per_sm;
    if (per_sm > 0 && resident >= 2 * plan.onepass_chunks) {
      v.onepass = true;
      v.chunk = plan.onepass_chunk;
      v.P = plan.onepass_chunks;
      const uint32_t tickets = uint32_t(groups * plan.onepass_chunks);
      GnStep zero;
      zero.memset_counters = true;
      zero.groups = groups;
      v.steps.push_back(zero);
      GnStep s = launch_step(kernel, Args::P_TICKETS, dim3(unsigned(std::min<int64_t>(tickets, resident))),
                             dim3(kBlock), smem);
      s.tickets = tickets;
      v.steps.push_back(s);
      v.text = format("gn_onepass(%s,pre=%s,P=%lld,blocks=%u)", vec_text(vec_n), pre_text,
                      (long long)plan.onepass_chunks, s.grid.x);
      return v;
    }
  }
  const int64_t wave = wave_groups(plan, d, groups, o.l2_wave_fraction, dev);
  const void* stats = group_kernel<T, MODE_STATS>(vec_n, pre_kind);
  const void* apply = group_kernel<T, MODE_APPLY>(vec_n, pre_kind);
  for (int64_t g0 = 0; g0 < groups; g0 += wave) {
    const dim3 wgrid(unsigned(std::min(wave, groups - g0)), unsigned(plan.chunks));
    GnStep s = launch_step(stats, Args::P, wgrid, dim3(kBlock));
    s.group_offset = g0;
    v.steps.push_back(s);
    s.func = apply;
    v.steps.push_back(s);
  }
  v.text = format("gn_stats + gn_apply(%s,pre=%s,P=%lld,waves=%lld)", vec_text(vec_n), pre_text,
                  (long long)plan.chunks, (long long)ceil_div(groups, wave));
  return v;
}

}  // namespace

struct GnLaunchPlan {
  GnParams base{};  // shapes, chains, epsilon; pointers filled per run
  GnPlan shape{};
  GnVariant variants[3];
  int num_variants = 0;
};

void GnLaunchPlanDeleter::operator()(GnLaunchPlan* p) const { delete p; }

template <typename T>
static void plan_typed(const fusedops_groupnorm_desc& d, const fusedops_plan_options& o, GnLaunchPlan& lp) {
  constexpr int kVec = 16 / sizeof(T);
  const DeviceInfo dev = device_info();
  if (lp.shape.kind == GnPlan::ROW) {
    if (d.C % kVec == 0) lp.variants[lp.num_variants++] = plan_row<T>(d, lp.shape, true, o, dev);
    lp.variants[lp.num_variants++] = plan_row<T>(d, lp.shape, false, o, dev);
    return;
  }
  // 16-byte vectors when S is a multiple of kVec, else 8-byte ones (model 4 in 16-bit: S = 258 * 258 = 8 * 8320 + 4,
  // which fell to the scalar path and ran 3x slower than float32), else scalar.
  if (d.S % kVec == 0) lp.variants[lp.num_variants++] = plan_split<T>(d, lp.shape, kVec, o, dev);
  if (d.S % (kVec / 2) == 0) lp.variants[lp.num_variants++] = plan_split<T>(d, lp.shape, kVec / 2, o, dev);
  lp.variants[lp.num_variants++] = plan_split<T>(d, lp.shape, 1, o, dev);
}

int make_gn_launch_plan(const fusedops_groupnorm_desc& d, const fusedops_plan_options& o, GnLaunchPlanPtr* out,
                        std::string* kernels, char* err, size_t err_len) {
  GnLaunchPlanPtr lp(new GnLaunchPlan());
  lp->shape = plan_groupnorm(d);
  GnParams& p = lp->base;
  p.param_dtype = d.param_dtype;
  p.reduce = d.reduce;
  p.pre = d.pre;
  p.post = d.post;
  p.N = d.N;
  p.C = d.C;
  p.S = d.S;
  p.G = d.num_groups;
  p.Cg = d.C / d.num_groups;
  p.L = lp->shape.group_len;
  p.eps = d.epsilon;
  p.div_cg.init(uint32_t(p.Cg));
  p.div_sv.init(1);
  switch (d.x_dtype) {
    case FUSEDOPS_F16: plan_typed<__half>(d, o, *lp); break;
    case FUSEDOPS_BF16: plan_typed<__nv_bfloat16>(d, o, *lp); break;
    default: plan_typed<float>(d, o, *lp); break;
  }
  // Drop variants this device cannot run (a kernel attribute the device refused).
  int kept = 0;
  for (int i = 0; i < lp->num_variants; ++i) {
    if (lp->variants[i].steps.empty()) continue;
    if (i != kept) lp->variants[kept] = std::move(lp->variants[i]);  // never self-move: it would empty the variant
    ++kept;
  }
  lp->num_variants = kept;
  if (kept == 0)
    return core::set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                             "GroupNorm of C=%lld needs %zu bytes of shared memory a block, more than this device "
                             "allows",
                             (long long)d.C, lp->shape.smem_bytes);
  std::string text = lp->variants[0].text;
  if (kept > 1) text += " [misaligned pointers: " + lp->variants[kept - 1].text + "]";
  *kernels = text;
  *out = std::move(lp);
  return FUSEDOPS_OK;
}

cudaError_t run_gn(const GnLaunchPlan& lp, const GnPointers& a, cudaStream_t stream) {
  const GnVariant* v = &lp.variants[lp.num_variants - 1];
  for (int i = 0; i < lp.num_variants; ++i) {
    const GnVariant& c = lp.variants[i];
    bool ok = aligned(a.x, c.io_align) && aligned(a.y, c.io_align) && aligned(a.gamma, c.param_align) &&
              aligned(a.beta, c.param_align) && aligned(a.bias, c.param_align);
    for (int k = 0; k < FUSEDOPS_MAX_EXTRAS && ok; ++k) ok = aligned(a.extras[k], c.param_align);
    if (ok) {
      v = &c;
      break;
    }
  }
  GnParams p = lp.base;
  p.x = a.x;
  p.y = a.y;
  p.gamma = a.gamma;
  p.beta = a.beta;
  p.bias = a.bias;
  for (int k = 0; k < FUSEDOPS_MAX_EXTRAS; ++k) p.ex.p[k] = a.extras[k];
  p.chunk = v->chunk;
  p.P = int32_t(v->P);
  p.div_sv = v->div_sv;
  const int64_t groups = lp.base.N * lp.base.G;
  char* ws = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(a.workspace), kAlign));
  if (v->onepass) {
    p.arrived = reinterpret_cast<unsigned*>(ws);
    p.partials = reinterpret_cast<Welford*>(ws + onepass_partials_offset(groups));
  } else if (lp.shape.workspace) {
    p.partials = reinterpret_cast<Welford*>(ws);
    p.stats = reinterpret_cast<float2*>(ws + align_up(size_t(groups * v->P) * sizeof(Welford), kAlign));
  }
  for (const GnStep& s : v->steps) {
    if (s.memset_counters) {
      const cudaError_t e = cudaMemsetAsync(p.arrived, 0, size_t(s.groups + 1) * sizeof(unsigned), stream);
      if (e != cudaSuccess) return e;
      continue;
    }
    p.group_offset = s.group_offset;
    int lpg = s.lpg, slices = s.slices, rows = s.rows;
    uint32_t tickets = s.tickets;
    int64_t ngroups = s.groups;
    void* args[4] = {&p, nullptr, nullptr, nullptr};
    switch (s.args) {
      case Args::P: break;
      case Args::P_TICKETS: args[1] = &tickets; break;
      case Args::P_GROUPS: args[1] = &ngroups; break;
      case Args::P_LPG_SLICES: args[1] = &lpg, args[2] = &slices; break;
      case Args::P_LPG_SLICES_ROWS: args[1] = &lpg, args[2] = &slices, args[3] = &rows; break;
    }
    const cudaError_t e = s.cluster > 1 ? launch_clusters(s, args, stream)
                                        : cudaLaunchKernel(s.func, s.grid, s.block, args, s.smem, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

GnPlan plan_groupnorm(const fusedops_groupnorm_desc& d) {
  GnPlan plan;
  const int64_t Cg = d.C / d.num_groups;
  const int64_t groups = d.N * d.num_groups;
  plan.group_len = Cg * d.S;
  const size_t row_smem = align_up(size_t(d.C) * 4, 8) + size_t(d.num_groups) * 8;
  if (d.S == 1 && row_smem <= kRowSmemMax) {
    plan.kind = GnPlan::ROW;
    plan.smem_bytes = row_smem;
    return plan;
  }
  const int64_t L = plan.group_len;
  // Chunks of at most chunk_max elements, but enough of them for kTargetBlocks blocks when there are few groups.
  const auto split = [&](int64_t chunk_max, int64_t* chunk) {
    const int64_t chunk_min = 2048;
    int64_t P = ceil_div(L, chunk_max);
    if (groups * P < kTargetBlocks) P = std::max(P, std::min(ceil_div(L, chunk_min), ceil_div(kTargetBlocks, groups)));
    P = std::min<int64_t>(std::max<int64_t>(P, 1), 65535);  // gridDim.y limit
    *chunk = int64_t(align_up(size_t(ceil_div(L, P)), 8));
    return ceil_div(L, *chunk);
  };
  int64_t chunk = 0;
  const int64_t P = split(int64_t(kBlock) * (16 / elem_size(d.x_dtype)) * 16, &chunk);  // 16 vectors a thread
  plan.chunk = chunk;
  plan.chunks = P;
  if (d.reduce != FUSEDOPS_REDUCE_NONE) {
    plan.kind = GnPlan::SPLIT_REDUCE;
    plan.workspace = align_up(size_t(groups * P) * sizeof(Welford), kAlign) + size_t(groups) * sizeof(float2) + kAlign;
  } else if (P == 1) {
    plan.kind = GnPlan::FUSED;
  } else {
    plan.kind = GnPlan::SPLIT;
    plan.workspace = size_t(groups * P) * sizeof(Welford) + kAlign;
    int64_t chunk1 = 0;
    const int64_t P1 = split(kOnepassMaxChunk, &chunk1);  // the same split, capped by the shared-memory chunk
    if (groups * P1 < int64_t(UINT32_MAX)) {
      plan.onepass_chunk = chunk1;
      plan.onepass_chunks = P1;
      plan.workspace = std::max(plan.workspace, onepass_partials_offset(groups) + size_t(groups * P1) * sizeof(Welford)
                                                    + kAlign);
    }
  }
  return plan;
}

int check_cuda_limits(const fusedops_groupnorm_desc& d, const char* op, char* err, size_t err_len) {
  const int64_t groups = d.N * d.num_groups;
  const int64_t L = d.C / d.num_groups * d.S;
  if (groups > INT32_MAX || L > int64_t(UINT32_MAX) || d.C > int64_t(UINT32_MAX))
    return core::set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                             "%s: N*num_groups=%lld groups of %lld elements exceed the CUDA kernel's index range", op,
                             (long long)groups, (long long)L);
  return FUSEDOPS_OK;
}

}  // namespace cuda
}  // namespace fusedops
