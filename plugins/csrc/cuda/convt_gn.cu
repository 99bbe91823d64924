// ConvTransposeGroupNormAct on CUDA (issue 13): the plans and runs of its kernels. The convolution is the mma.sync
// implicit GEMM (convt_igemm.cuh) or, on sm_90 where it applies, the wgmma kernel (sm90/convt_wgmma.cu); each writes
// the pre-normalisation value into Y and per-(sample, group) partial statistics of its tiles. Then a finishing kernel
// (Chan's combine per (sample, group)) and an in-place normalise + `post` pass over Y (convt_gn_finish.cuh), or, as
// an A/B option behind the wgmma kernel, the normaliser kernel (convt_normaliser.cuh). No tensor of Y's size besides
// Y; the workspace holds the partials, the (mean, rstd) pairs and the packed weights.
#include "cuda/convt_gn.h"

#include <algorithm>
#include <cstdio>

#include "core/message.h"
#include "cuda/convt_gn_blocks.cuh"
#include "cuda/convt_gn_finish.cuh"
#include "cuda/convt_igemm.cuh"
#include "cuda/convt_normaliser.cuh"
#include "cuda/device_common.cuh"
#include "cuda/device_query.h"
#include "cuda/sm90/convt_wgmma.h"

namespace fusedops {
namespace cuda {

namespace {

struct Layout {
  int32_t tiles_h, tiles_w, tiles_c, rows_in, span, ldx, plane, stage_floats, cout_gp, x_vec4, xi;
  int64_t pixel_blocks;
  size_t smem, partials_bytes, stats_offset, wp_offset, total;
};

Layout layout(const fusedops_op_desc& d) {
  const fusedops_conv_desc& cv = d.conv;
  const bool one_d = cv.spatial_rank == 1;
  const int i = one_d ? 0 : 1;  // the column dimension's index in the descriptor's arrays
  const int64_t wout = cv.output[i], hout = one_d ? 1 : cv.output[0];
  const int64_t win = cv.input[i];
  const int sw = cv.strides[i], kw = cv.kernel[i], dw = cv.dilations[i];
  const int sh = one_d ? 1 : cv.strides[0], kh = one_d ? 1 : cv.kernel[0], dh = one_d ? 1 : cv.dilations[0];
  Layout l{};
  l.tiles_h = int32_t(ceil_div(hout, kTR));
  l.tiles_w = int32_t(ceil_div(wout, kTM));
  const int64_t cout_g = d.d.gn.C / cv.group;
  l.tiles_c = int32_t(cv.group * ceil_div(cout_g, kTN));
  l.cout_gp = int32_t(ceil_div(cout_g, kTN) * kTN);
  l.rows_in = int32_t((kTR - 1 + (kh - 1) * dh) / sh + 1);
  l.span = int32_t((kTM - 1 + (kw - 1) * dw) / sw + 1);
  l.x_vec4 = d.d.gn.x_dtype == FUSEDOPS_F32 && win % 4 == 0 ? 1 : 0;  // and X 16-byte aligned: per run
  // vec4: stage column 0 is the input column rounded down to a multiple of 4 (up to 3 more columns), and the zero
  // column sits alone in the last 4-column group; else the zero column follows the span.
  l.ldx = l.x_vec4 ? int32_t(align_up(size_t(l.span) + 3, 4) + 4) : l.span + 1;
  l.plane = int32_t(align_up(size_t(l.rows_in) * l.ldx, 32) + 8);  // = 8 (mod 32): conflict-free A fragments
  l.stage_floats = kKC * l.plane + kh * kw * kKC * kLdw;
  // vec4 needs each stage offset < 2^16 floats and a channel chunk's element offsets in int32
  if (l.x_vec4 && (size_t(kKC) * l.plane > 0xffff || int64_t(kKC) * (one_d ? 1 : cv.input[0]) * win >= INT32_MAX)) l.x_vec4 = 0;
  l.xi = l.x_vec4 ? int32_t(ceil_div(int64_t(kKC) * l.rows_in * (l.ldx / 4 - 1), kThreads)) : 0;
  const size_t main = size_t(kStages) * l.stage_floats * sizeof(float) +
                      align_up(size_t(kw * kTM + kTR * kh), 2) * sizeof(int) + size_t(l.xi) * kThreads * sizeof(int2);
  const size_t tile = size_t(kTN) * (kTR * kTM + 4) * sizeof(float);
  l.smem = std::max(main, tile);
  l.pixel_blocks = int64_t(l.tiles_h) * l.tiles_w;
  const int64_t groups = d.d.gn.N * d.d.gn.num_groups;
  l.partials_bytes = size_t(groups) * size_t(l.pixel_blocks) * size_t(l.tiles_c) * sizeof(Welford);
  l.stats_offset = align_up(l.partials_bytes, kAlignWs);
  l.wp_offset = align_up(l.stats_offset + size_t(groups) * sizeof(float2), kAlignWs);
  const size_t wp_bytes = size_t(cv.group) * kh * kw * size_t(cv.in_channels / cv.group) * l.cout_gp * sizeof(float);
  l.total = kAlignWs + l.wp_offset + wp_bytes;
  return l;
}

}  // namespace

struct ConvtLaunch {
  ConvtParams base{};
  const void* conv = nullptr;
  const void* pack = nullptr;
  const void* normalize = nullptr;
  size_t smem = 0;
  dim3 pack_grid, conv_grid, finish_grid, norm_grid;
  int64_t norm_chunk = 0;
  Layout l{};
  bool sm90 = false;  // the wgmma kernel (sm90/convt_wgmma.cu) instead of convt_kernel
  ConvtSm90Params s9{};
  ConvtSm90Layout s9l{};
  int32_t norm_blocks = 0;   // > 0: the normaliser kernel runs behind the wgmma convolution on this many blocks
  uint32_t norm_target = 0;  // the partials of a sample it waits for
  const void* normaliser = nullptr;
};
void ConvtLaunchDeleter::operator()(ConvtLaunch* p) const { delete p; }

// Either kernel's workspace, whichever the device picks.
size_t convt_workspace_size(const fusedops_op_desc& d) {
  const ConvtSm90Layout s9 = convt_sm90_layout(d);
  return std::max(layout(d).total, s9.eligible ? s9.total : size_t(0));
}

namespace {
// The sm_90a wgmma path for a plan, when the device, the build and the descriptor allow it (and the options do not
// force the mma.sync kernel): its parameters, shared memory and grids. False leaves the plan on convt_kernel; `why`
// says why (for a forced choice).
bool plan_sm90(const fusedops_op_desc& d, const ConvtParams& b, const fusedops_plan_options& o, ConvtLaunch* p,
               const char** why) {
  const ConvtSm90Layout s9 = convt_sm90_layout(d);
  if (!convt_sm90_built()) return *why = "this library was built without sm_90a kernels", false;
  if (device_info().cc_major != 9) return *why = "the device is not sm_90", false;
  if (!s9.eligible) return *why = s9.why, false;
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return cudaGetLastError(), *why = "the device's shared-memory limit is unknown", false;
  int32_t stages = 0, ring = 0;
  const size_t smem = convt_sm90_smem(s9.span, b.kh * b.kw, s9.three, o.convt_ring_producer ? s9.ring_chunk : 0,
                                      size_t(optin), &stages, &ring);
  if (smem == 0) return *why = "its stages exceed the device's shared memory", false;
  // The cap goes to the device's limit, not this plan's size: plans of other shapes (or options) share the kernels,
  // and a later plan with less shared memory must not make this one's launch invalid.
  if (convt_sm90_prepare(size_t(optin)) != cudaSuccess)
    return cudaGetLastError(), *why = "the device refused the kernel's shared memory", false;
  ConvtSm90Params& q = p->s9;
  q.param_dtype = b.param_dtype;
  q.pre = b.pre;
  q.batch = int32_t(d.d.gn.N);
  q.cin = b.cin, q.cout = b.cout, q.hin = b.hin, q.win = b.win, q.hout = b.hout, q.wout = b.wout;
  q.kh = b.kh, q.kw = b.kw, q.dh = b.dh, q.dw = b.dw;
  q.wpad = s9.wpad, q.offy = s9.offy, q.offx = s9.offx, q.span = s9.span;
  q.x_dtype = d.d.gn.x_dtype;
  q.chunks = b.cin / (q.x_dtype == FUSEDOPS_F32 ? kSm90Chunk : 2 * kSm90Chunk), q.stages = stages, q.tiles = s9.tiles;
  q.G = b.G, q.Cg = b.Cg, q.tiles_c = s9.tiles_c;
  q.pre_kind = convt_sm90_pre_kind(b.pre);
  // The normaliser kernel behind the convolution (convt_normaliser.cuh) where asked, on at most half the SMs (and
  // groups whose statistics fit its shared memory); the convolution takes the others, one block an SM, at most one
  // a tile (convt_blocks caps them).
  const int sms = device_info().sms;
  p->norm_blocks = b.G <= kNormaliserMaxGroups ? std::min(o.convt_normalisers > 0 ? o.convt_normalisers : 0, sms / 2)
                                                : 0;
  if (p->norm_blocks > 0 && cudaFuncSetAttribute(p->normaliser, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 int(normaliser_smem(b.G))) != cudaSuccess)
    return cudaGetLastError(), *why = "the device refused the normaliser kernel's shared memory", false;
  q.blocks = int32_t(std::min<int64_t>(int64_t(s9.tiles) * s9.tiles_c * q.batch,
                                       o.convt_blocks > 0 ? o.convt_blocks : sms - p->norm_blocks));
  // Partials a sample: one a (warpgroup tile, group in its channel tile), each counted once written.
  p->norm_target = uint32_t(2 * s9.tiles * s9.tiles_c * (kSm90Cout / std::min(b.Cg, kSm90Cout)));
  q.three = s9.three;
  q.ring = ring;
  p->smem = smem;
  p->s9l = s9;
  p->sm90 = true;
  // The finishing kernel reads the partials as [N][G][pixel blocks][channel tiles]: one pixel block per consumer
  // warpgroup, channel tiles of 64 (= kTN).
  p->base.tiles_h = 1, p->base.tiles_w = 2 * s9.tiles, p->base.tiles_c = s9.tiles_c;
  return true;
}
}  // namespace

int convt_plan(const fusedops_op_desc& d, const fusedops_plan_options& o, ConvtLaunchPtr* out, size_t* workspace,
               std::string* kernels, char* err, size_t err_len) {
  const char* op = "ConvTransposeGroupNormAct";
  const fusedops_groupnorm_desc& gn = d.d.gn;
  const fusedops_conv_desc& cv = d.conv;
  using core::set_message;
  if (gn.reduce != FUSEDOPS_REDUCE_NONE)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: the CUDA kernel has no channel reduction yet (reduce code %d of %s)", op,
                       int(gn.reduce), FUSEDOPS_REDUCE_NAMES_TEXT);
  if (cv.channels_last)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: the CUDA kernel takes NCHW tensors only (channels_last = 1 given)", op);
  const DeviceInfo dev = device_info();
  if (dev.cc_major < 8)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: the CUDA kernel needs compute capability 8.0 or newer (TF32 tensor cores)", op);
  const bool one_d = cv.spatial_rank == 1;
  ConvtLaunchPtr p(new ConvtLaunch());
  const Layout l = layout(d);
  ConvtParams& b = p->base;
  b.param_dtype = gn.param_dtype;
  b.pre = gn.pre;
  b.post = gn.post;
  b.cin = int32_t(cv.in_channels);
  b.cout = int32_t(gn.C);
  b.groups = cv.group;
  b.cin_g = b.cin / cv.group;
  b.cout_g = b.cout / cv.group;
  b.hin = one_d ? 1 : int32_t(cv.input[0]);
  b.win = int32_t(one_d ? cv.input[0] : cv.input[1]);
  b.hout = one_d ? 1 : int32_t(cv.output[0]);
  b.wout = int32_t(one_d ? cv.output[0] : cv.output[1]);
  const int i = one_d ? 0 : 1;  // the column dimension's index in the descriptor's arrays
  b.kh = one_d ? 1 : cv.kernel[0];
  b.kw = cv.kernel[i];
  b.sh = one_d ? 1 : cv.strides[0];
  b.sw = cv.strides[i];
  b.ph = one_d ? 0 : cv.pads_begin[0];
  b.pw = cv.pads_begin[i];
  b.dh = one_d ? 1 : cv.dilations[0];
  b.dw = cv.dilations[i];
  b.G = gn.num_groups;
  b.Cg = int32_t(gn.C / gn.num_groups);
  b.cout_gp = l.cout_gp;
  b.tiles_h = l.tiles_h;
  b.tiles_w = l.tiles_w;
  b.tiles_c = l.tiles_c;
  b.rows_in = l.rows_in;
  b.span = l.span;
  b.ldx = l.ldx;
  b.plane = l.plane;
  b.x_vec4 = l.x_vec4;
  b.stage_floats = l.stage_floats;
  b.xi = l.xi;
  b.eps = gn.epsilon;
  if (gn.N > 65535 || l.tiles_c > 65535 || l.pixel_blocks > INT32_MAX)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: batch %lld, %d channel tiles or %lld pixel blocks exceed the kernel's grid", op,
                       (long long)gn.N, l.tiles_c, (long long)l.pixel_blocks);
  const bool three = gn.x_dtype == FUSEDOPS_F32 && !d.d.allow_tf32;
  switch (gn.x_dtype) {
    case FUSEDOPS_F16:
      kernels_of<__half, Mode::EXACT>(&p->conv, &p->pack), p->normalize = normalize_kernel<__half>();
      p->normaliser = normaliser_kernel<__half>();
      break;
    case FUSEDOPS_BF16:
      kernels_of<__nv_bfloat16, Mode::EXACT>(&p->conv, &p->pack), p->normalize = normalize_kernel<__nv_bfloat16>();
      p->normaliser = normaliser_kernel<__nv_bfloat16>();
      break;
    default:
      if (three) kernels_of<float, Mode::THREE>(&p->conv, &p->pack);
      else kernels_of<float, Mode::TF32>(&p->conv, &p->pack);
      p->normalize = normalize_kernel<float>(), p->normaliser = normaliser_kernel<float>();
      break;
  }
  p->smem = l.smem;
  if (!allow_smem(p->conv, p->smem))
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: %zu bytes of shared memory per block (kernel %dx%d, dilations %dx%d, strides %dx%d) "
                       "exceed this device's limit", op, p->smem, b.kh, b.kw, b.dh, b.dw, b.sh, b.sw);
  const int64_t wp_elems = int64_t(cv.group) * b.kh * b.kw * b.cin_g * l.cout_gp;
  p->pack_grid = dim3(unsigned(std::min<int64_t>(1024, ceil_div(wp_elems, kNormThreads))));
  p->conv_grid = dim3(unsigned(l.pixel_blocks), unsigned(l.tiles_c), unsigned(gn.N));
  p->finish_grid = dim3(unsigned(gn.N * gn.num_groups));
  const int64_t S = int64_t(b.hout) * b.wout;
  // The normalise pass: a plane's 16-byte vectors in chunks of whole rounds (kNormVecs a thread).
  const int64_t esize = gn.x_dtype == FUSEDOPS_F32 ? 4 : 2, round = kNormVecs * kNormThreads;
  const int64_t plane_vecs = ceil_div(S * esize, int64_t(16));
  const int64_t planes = gn.N * gn.C, max_chunks = std::max<int64_t>(1, INT32_MAX / std::max<int64_t>(1, planes));
  const int64_t chunks = std::clamp<int64_t>(ceil_div(plane_vecs, round), 1, max_chunks);
  p->norm_chunk = std::max<int64_t>(1, ceil_div(ceil_div(plane_vecs, chunks), round)) * round;  // vectors a block
  if (planes * ceil_div(plane_vecs, p->norm_chunk) > INT32_MAX)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED,
                       "%s: %lld output planes exceed the normalise pass's grid", op, (long long)planes);
  p->norm_grid = dim3(unsigned(planes * ceil_div(plane_vecs, p->norm_chunk)));  // 1-D: (plane, chunk), chunk fastest
  p->l = l;
  *workspace = convt_workspace_size(d);
  const char* why = "";
  if (o.convt_kernel != FUSEDOPS_CONVT_IGEMM && !plan_sm90(d, b, o, p.get(), &why) &&
      o.convt_kernel == FUSEDOPS_CONVT_WGMMA)
    return set_message(err, err_len, FUSEDOPS_ERR_UNSUPPORTED, "%s: the sm_90 wgmma kernel cannot run this: %s", op,
                       why);
  char text[256], behind[64] = " + gn_stats_finish + gn_normalize_inplace";
  if (p->norm_blocks > 0) std::snprintf(behind, sizeof behind, " + convt_normaliser(blocks=%d,behind)", p->norm_blocks);
  if (p->sm90)
    std::snprintf(text, sizeof text, "convt_pack_w + convt_wgmma(%s,64x%d,stages=%d,ring=%d,smem=%zu,blocks=%d)%s",
                  p->s9.three                     ? "3xtf32"
                  : gn.x_dtype == FUSEDOPS_F32    ? "tf32"
                  : gn.x_dtype == FUSEDOPS_BF16   ? "bf16"
                                                  : "f16",
                  convt_sm90_tile_pixels(p->s9.three != 0), p->s9.stages, p->s9.ring, p->smem, p->s9.blocks,
                  behind);
  else
    std::snprintf(text, sizeof text,
                  "convt_pack_w + convt_igemm(%s,%dx%dx%d,kc=%d,smem=%zu%s) + gn_stats_finish + gn_normalize_inplace",
                  three ? "3xtf32" : gn.x_dtype == FUSEDOPS_F32 ? "tf32" : gn.x_dtype == FUSEDOPS_F16 ? "f16>tf32"
                                                                                                      : "bf16>tf32",
                  kTR, kTM, kTN, kKC, p->smem, l.x_vec4 ? ",vec4" : "");
  *kernels = text;
  *out = std::move(p);
  return FUSEDOPS_OK;
}

namespace {
// The normaliser kernel right behind the wgmma convolution in the stream, allowed to start before it ends (the
// convolution triggers its dependents at its start); without that permission it would run after it, still correct.
cudaError_t launch_normaliser(const ConvtLaunch& lp, ConvtParams& p, uint32_t* done, int32_t batch,
                              cudaStream_t stream) {
  const uint32_t* done_c = done;
  uint32_t target = lp.norm_target;
  void* args[] = {&p, &done_c, &target, &batch};
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(lp.norm_blocks));
  cfg.blockDim = dim3(unsigned(kNormaliserThreads));
  cfg.dynamicSmemBytes = normaliser_smem(p.G);
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelExC(&cfg, lp.normaliser, args);
}
}  // namespace

cudaError_t convt_run(const ConvtLaunch& lp, const void* const* in, int32_t num_inputs, void* y, void* workspace,
                      cudaStream_t stream) {
  ConvtParams p = lp.base;
  p.x = in[0];
  p.x_vec4 = p.x_vec4 && reinterpret_cast<uintptr_t>(in[0]) % 16 == 0;
  p.w = in[1];
  p.bias = in[2];
  p.gamma = in[3];
  p.beta = in[4];
  for (int k = 0; k < FUSEDOPS_MAX_EXTRAS; ++k) p.ex.p[k] = 5 + k < num_inputs ? in[5 + k] : nullptr;
  p.y = y;
  char* ws = reinterpret_cast<char*>(align_up(reinterpret_cast<uintptr_t>(workspace), kAlignWs));
  p.partials = reinterpret_cast<Welford*>(ws);
  p.stats = reinterpret_cast<float2*>(ws + (lp.sm90 ? lp.s9l.stats_offset : lp.l.stats_offset));
  p.wp = reinterpret_cast<const float*>(ws + (lp.sm90 ? lp.s9l.wp_offset : lp.l.wp_offset));
  void* args[2] = {&p, nullptr};
  cudaError_t e;
  if (lp.sm90) {
    ConvtSm90Params q = lp.s9;
    const int per16 = q.x_dtype == FUSEDOPS_F32 ? 4 : 8;  // elements in 16 bytes
    q.x = p.x, q.wp = p.wp, q.bias = p.bias, q.ex = p.ex, q.y = y, q.partials = p.partials;
    q.x_vec = q.win % per16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
    // The register epilogue stores pixel pairs (wpad and wout even, Y aligned to two elements) and steps 8 pixels
    // with at most one row wrap: other shapes take the shared-memory one.
    const bool y_pairs = q.wpad % 2 == 0 && q.wout % 2 == 0 &&
                         reinterpret_cast<uintptr_t>(y) % (2 * (q.x_dtype == FUSEDOPS_F32 ? 4 : 2)) == 0;
    if (!y_pairs || q.wpad < 8) q.pre_kind = -1;
    q.done = lp.norm_blocks > 0 ? reinterpret_cast<uint32_t*>(ws + lp.s9l.done_offset) : nullptr;
    e = convt_sm90_pack(p.w, const_cast<float*>(p.wp), q.x_dtype, q.cin, q.cout, q.kh * q.kw, q.three != 0, stream);
    if (e == cudaSuccess && q.done) e = cudaMemsetAsync(q.done, 0, sizeof(uint32_t) * q.batch, stream);
    if (e == cudaSuccess) e = convt_sm90_conv(q, lp.smem, stream);
    if (e == cudaSuccess && q.done) return launch_normaliser(lp, p, q.done, q.batch, stream);
  } else {
    e = cudaLaunchKernel(lp.pack, lp.pack_grid, dim3(kNormThreads), args, 0, stream);
    if (e == cudaSuccess) e = cudaLaunchKernel(lp.conv, lp.conv_grid, dim3(kThreads), args, lp.smem, stream);
  }
  if (e != cudaSuccess) return e;
  e = cudaLaunchKernel(reinterpret_cast<const void*>(convt_finish_kernel), lp.finish_grid, dim3(kNormThreads), args,
                       0, stream);
  if (e != cudaSuccess) return e;
  int64_t chunk = lp.norm_chunk;
  args[1] = &chunk;
  return cudaLaunchKernel(lp.normalize, lp.norm_grid, dim3(kNormThreads), args, 0, stream);
}

}  // namespace cuda
}  // namespace fusedops
