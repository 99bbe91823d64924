// Internal helpers of the CPU kernels: 16-bit conversions, the elementwise step table, span statistics, and a
// small persistent thread pool. Not part of the ABI.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "fusedops/fusedops.h"

namespace fusedops {
namespace cpu {

// ---- 16-bit <-> float32 (bit exact, round to nearest even, NaN/inf preserved) ----
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | man << 13 | (man ? 0x400000u : 0u);
  } else {
    u = sign | (exp + 112u) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (au >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (au < 0x38800000u) {                        // subnormal or zero in half
    if (au < 0x33000000u) return sign;           // < 2^-25 rounds to 0
    uint32_t e = au >> 23;
    uint32_t man = (au & 0x7fffffu) | 0x800000u;
    uint32_t drop = 126 - e;  // value = man * 2^(e-150) and the half subnormal unit is 2^-24
    uint32_t kept = man >> drop;
    uint32_t rem = man & ((1u << drop) - 1u);
    uint32_t half = 1u << (drop - 1);
    if (rem > half || (rem == half && (kept & 1u))) ++kept;
    return sign | static_cast<uint16_t>(kept);
  }
  uint32_t r = au + 0xfffu + ((au >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  return sign | static_cast<uint16_t>(((r >> 13) - (112u << 10)) & 0x7fffu);
}

// Load n elements of dtype dt starting at element offset `off` into float32 dst.
inline void load_f32(const void* src, int32_t dt, int64_t off, int64_t n, float* dst) {
  if (dt == FUSEDOPS_F32) {
    std::memcpy(dst, static_cast<const float*>(src) + off, static_cast<size_t>(n) * 4);
  } else if (dt == FUSEDOPS_F16) {
    const uint16_t* s = static_cast<const uint16_t*>(src) + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src) + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
  }
}
inline void store_from_f32(const float* v, int64_t n, void* dst, int32_t dt, int64_t off) {
  if (dt == FUSEDOPS_F32) {
    std::memcpy(static_cast<float*>(dst) + off, v, static_cast<size_t>(n) * 4);
  } else if (dt == FUSEDOPS_F16) {
    uint16_t* d = static_cast<uint16_t*>(dst) + off;
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(v[i]);
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst) + off;
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(v[i]);
  }
}

// float32 copies of the per-channel vectors (C elements each).
struct ChannelParams {
  std::vector<float> gamma, beta, bias;
  std::vector<std::vector<float>> extras;
  const float* ex[FUSEDOPS_MAX_EXTRAS] = {};

  void load(const fusedops_groupnorm_desc& d, const void* g, const void* b, const void* bias_ptr,
            const void* const* extras_in, int32_t n_extras) {
    const int64_t C = d.C;
    gamma.resize(C);
    beta.resize(C);
    load_f32(g, d.param_dtype, 0, C, gamma.data());
    load_f32(b, d.param_dtype, 0, C, beta.data());
    if (bias_ptr) {
      bias.resize(C);
      load_f32(bias_ptr, d.param_dtype, 0, C, bias.data());
    }
    extras.resize(n_extras);
    for (int32_t k = 0; k < n_extras; ++k) {
      extras[k].resize(C);
      load_f32(extras_in[k], d.param_dtype, 0, C, extras[k].data());
      ex[k] = extras[k].data();
    }
  }
};

// ---- elementwise steps (float32 math; semantics of fusedops.catalog) ----
inline float softplus(float x, float beta, float threshold) {
  float bx = beta * x;
  return bx > threshold ? x : std::log1p(std::exp(bx)) / beta;
}

// Apply `chain` to v[0..n). Element i has channel c0 + i (per_element_channel) or c0 (one channel for the span);
// extras[k] are float32 arrays of C elements. Step-outer loops keep each pass simple enough to vectorise.
void apply_chain(const fusedops_chain& chain, float* v, int64_t n, const float* const* extras, int64_t c0,
                 bool per_element_channel);

// ---- statistics: exact mean / M2 of a short block, Chan merge of blocks (double accumulation across blocks) ----
// Elements per moments block (and the general kernel's L1 block): every CPU kernel merges blocks of this size, so a
// group's statistics are the same sums in the same order whichever kernel runs it.
constexpr int64_t kMomentBlock = 1024;

struct Moments {
  double count = 0, mean = 0, m2 = 0;
  // The block's sums run in double with four independent accumulators: a float sum of ~1024 values with a large
  // mean (say 100 +- 6) is off by ~1e-4 in the mean, which GroupNorm then shifts every output by; the four chains
  // also let the compiler vectorise the loop without reassociating anything.
  void merge_block(const float* v, int64_t n) {
    if (n <= 0) return;
    double s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int k = 0; k < 4; ++k) s[k] += static_cast<double>(v[i + k]);
    for (; i < n; ++i) s[0] += static_cast<double>(v[i]);
    const double nb = static_cast<double>(n), bm = ((s[0] + s[1]) + (s[2] + s[3])) / nb;
    double q[4] = {0, 0, 0, 0};
    for (i = 0; i + 4 <= n; i += 4)
      for (int k = 0; k < 4; ++k) {
        const double d = static_cast<double>(v[i + k]) - bm;
        q[k] += d * d;
      }
    for (; i < n; ++i) q[0] += (static_cast<double>(v[i]) - bm) * (static_cast<double>(v[i]) - bm);
    const double tot = count + nb, delta = bm - mean;
    mean += delta * nb / tot;
    m2 += ((q[0] + q[1]) + (q[2] + q[3])) + delta * delta * count * nb / tot;
    count = tot;
  }
  void merge(const Moments& o) {  // Chan et al.: combine two partial results
    if (o.count <= 0) return;
    const double tot = count + o.count, delta = o.mean - mean;
    mean += delta * o.count / tot;
    m2 += o.m2 + delta * delta * count * o.count / tot;
    count = tot;
  }
  double variance() const { return count > 0 ? m2 / count : 0.0; }  // biased, as GroupNorm
};

// ---- channel reductions ----
struct ReduceAcc {  // double: sums over thousands of channels stay accurate to float32 rounding
  double a = 0, b = 0;  // min/max/sum/mean: a; logsumexp: a = running max, b = sum of exp(v - a)
};
void reduce_init(int32_t reduce, ReduceAcc* acc, int64_t n);
void reduce_update(int32_t reduce, ReduceAcc* acc, const float* v, int64_t n);  // acc[i] <- v[i]
float reduce_final(int32_t reduce, const ReduceAcc& acc, int64_t count);
void reduce_span(int32_t reduce, ReduceAcc& acc, const float* v, int64_t n);  // acc <- every v[i]

// ---- thread pool ----
// A host scheduler that replaces the private pool for parallel_for calls made on the installing thread (the ONNX
// Runtime adapter installs ORT's intra-op pool around a kernel call, so the fused kernels honour
// intra_op_num_threads and do not compete with ORT's spinning workers). run() must call task(task_ctx, t) once for
// every t in [0, n) and return when all are done; `threads` sizes the work split (0: the hardware's count; 1: the
// tasks run on the calling thread and run() is not called).
struct Scheduler {
  void (*run)(void* self, int64_t n, void (*task)(void* task_ctx, int64_t t), void* task_ctx);
  void* self;
  int threads;
};
class ScopedScheduler {
 public:
  explicit ScopedScheduler(const Scheduler* s);
  ~ScopedScheduler();
  ScopedScheduler(const ScopedScheduler&) = delete;
  ScopedScheduler& operator=(const ScopedScheduler&) = delete;

 private:
  const Scheduler* prev_;
};

// Number of worker threads the CPU kernels use: the installed Scheduler's, else the hardware's (at most 256).
int num_threads();
// Run fn(task) for task in [0, n_tasks) on the pool (the caller takes part). If the pool is busy (another caller,
// or a nested call from a task) the tasks run on the calling thread, so it never deadlocks. The first exception a
// task throws is re-thrown in the caller after all tasks finished.
void parallel_for(int64_t n_tasks, const std::function<void(int64_t task)>& fn);
// Same, but serial when the whole job is small (`work` ~ element operations below kMinParallelWork): waking the
// pool costs more than it saves below ~64K element operations.
constexpr int64_t kMinParallelWork = 1 << 16;
void parallel_for(int64_t n_tasks, int64_t work, const std::function<void(int64_t task)>& fn);

}  // namespace cpu
}  // namespace fusedops
