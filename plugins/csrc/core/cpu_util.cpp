// Elementwise chain application, channel reductions and the CPU thread pool.
//
// Why a private std::thread pool (and not OpenMP): the library is loaded into processes that already run their
// own OpenMP / thread pools (PyTorch's libgomp, ONNX Runtime's Eigen pool); bringing another OpenMP runtime into
// them invites oversubscription and runtime clashes, and needs no build flags. The pool is small, persistent
// (created on first use, joined at unload), and the caller works too.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>  // vectorised erf

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cpu_util.h"
#include "core/step_formulas.h"

namespace fusedops {
namespace cpu {

namespace {
constexpr float kSqrtHalf = 0.70710678118654752440f;

// silu / mish of -inf: PyTorch (and Eigen's scalar path) give -inf * 0 = NaN, but Eigen's packet logistic / exp clamp
// their input, so on long spans the result is -inf * tiny = -inf. Finite inputs never give -inf, so a plain pass
// (vectorised by the compiler; an Eigen select on a comparison is not) restores NaN.
inline void minus_inf_to_nan(float* v, int64_t n) {
  const float ninf = -std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < n; ++i) v[i] = v[i] == ninf ? nan : v[i];
}
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
}  // namespace

void apply_chain(const fusedops_chain& chain, float* v, int64_t n, const float* const* extras, int64_t c0,
                 bool per_element_channel) {
  for (int32_t si = 0; si < chain.num_steps; ++si) {
    const fusedops_step& s = chain.steps[si];
    const float a = s.a, b = s.b;
    if (fusedops_step_is_binary(s.op)) {
      const float* e = s.operand >= 0 ? extras[s.operand] + c0 : nullptr;
      const bool vec = e && per_element_channel;
      const float sc = e ? e[0] : a;
#define FUSEDOPS_BINARY(EXPR)                              \
  if (vec) {                                               \
    for (int64_t i = 0; i < n; ++i) {                      \
      const float x = v[i], o = e[i];                      \
      v[i] = (EXPR);                                       \
    }                                                      \
  } else {                                                 \
    for (int64_t i = 0; i < n; ++i) {                      \
      const float x = v[i], o = sc;                        \
      v[i] = (EXPR);                                       \
    }                                                      \
  }
      // Every binary step runs its spec formula (core/step_formulas.h).
      switch (s.op) {
#define FUSEDOPS_BINARY_CASE(E, FN) \
  case FUSEDOPS_STEP_##E: FUSEDOPS_BINARY(steps::FN(x, o, a, b)) break;
        FUSEDOPS_CPU_FORMULA_BINARY_STEPS(FUSEDOPS_BINARY_CASE)
#undef FUSEDOPS_BINARY_CASE
        default: break;
      }
#undef FUSEDOPS_BINARY
      continue;
    }
    // Steps without a hand-tuned path run their spec formula (core/step_formulas.h) in a plain loop the compiler
    // vectorises. Transcendental steps (the spec's cpu overrides) use Eigen's vectorised float kernels (exp, log1p,
    // tanh, erf, logistic): the scalar libm calls cost ~10x more and dominate the epilogue of model 3 (mish) and
    // model 4 (gelu) on the CPU.
    Eigen::Map<Eigen::ArrayXf> x(v, n);
    switch (s.op) {
#define FUSEDOPS_UNARY_CASE(E, FN)                                            \
  case FUSEDOPS_STEP_##E:                                                     \
    for (int64_t i = 0; i < n; ++i) v[i] = steps::FN(v[i], 0.f, a, b);        \
    break;
      FUSEDOPS_CPU_FORMULA_UNARY_STEPS(FUSEDOPS_UNARY_CASE)
#undef FUSEDOPS_UNARY_CASE
      case FUSEDOPS_STEP_SIGMOID:
        x = x.logistic();
        break;
      case FUSEDOPS_STEP_SILU:
        x = x * x.logistic();
        minus_inf_to_nan(v, n);
        break;
      case FUSEDOPS_STEP_TANH:
        x = x.tanh();
        break;
      case FUSEDOPS_STEP_MISH: {
        // x * tanh(softplus(x)) with one exp: tanh(log(1 + e)) = n / (n + 2), n = e (e + 2), e = exp(x);
        // softplus's threshold 20 makes it x above 20 (tanh(20) is 1 in float32).
        float e[256];
        for (int64_t o = 0; o < n; o += 256) {
          const int64_t m = std::min<int64_t>(256, n - o);
          Eigen::Map<Eigen::ArrayXf> xs(v + o, m), es(e, m);
          es = xs.min(20.f).exp();
          es = es * (es + 2.f);
          xs = (xs > 20.f).select(xs, xs * es / (es + 2.f));
        }
        minus_inf_to_nan(v, n);
        break;
      }
      case FUSEDOPS_STEP_SOFTPLUS:
        x = (x * a > b).select(x, (x * a).exp().log1p() / a);
        break;
      case FUSEDOPS_STEP_GELU:
        x = 0.5f * x * (1.f + (x * kSqrtHalf).erf());
        break;
      case FUSEDOPS_STEP_GELU_TANH:
        x = 0.5f * x * (1.f + (kSqrt2OverPi * (x + 0.044715f * x * x * x)).tanh());
        break;
      default: break;  // unreachable: descriptors are checked before any run
    }
  }
}

void reduce_init(int32_t reduce, ReduceAcc* acc, int64_t n) {
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    switch (reduce) {
      case FUSEDOPS_REDUCE_MIN: acc[i] = {inf, 0.0}; break;
      case FUSEDOPS_REDUCE_MAX: acc[i] = {-inf, 0.0}; break;
      case FUSEDOPS_REDUCE_LOGSUMEXP: acc[i] = {-inf, 0.0}; break;
      default: acc[i] = {0.0, 0.0}; break;
    }
  }
}

void reduce_update(int32_t reduce, ReduceAcc* acc, const float* v, int64_t n) {
  switch (reduce) {
    case FUSEDOPS_REDUCE_MIN:  // NaN is sticky, like torch.amin
      for (int64_t i = 0; i < n; ++i)
        if (v[i] < acc[i].a || std::isnan(v[i])) acc[i].a = std::isnan(acc[i].a) ? acc[i].a : v[i];
      break;
    case FUSEDOPS_REDUCE_MAX:
      for (int64_t i = 0; i < n; ++i)
        if (v[i] > acc[i].a || std::isnan(v[i])) acc[i].a = std::isnan(acc[i].a) ? acc[i].a : v[i];
      break;
    case FUSEDOPS_REDUCE_SUM:
    case FUSEDOPS_REDUCE_MEAN:
      for (int64_t i = 0; i < n; ++i) acc[i].a += v[i];
      break;
    case FUSEDOPS_REDUCE_LOGSUMEXP:  // online: a = running max, b = sum exp(v - a); a NaN in b stays (sticky)
      for (int64_t i = 0; i < n; ++i) {
        const double x = v[i];
        if (std::isnan(x) || std::isnan(acc[i].b)) {
          acc[i].b = std::numeric_limits<double>::quiet_NaN();
        } else if (x > acc[i].a) {
          acc[i].b = (std::isinf(acc[i].a) ? 0.0 : acc[i].b * std::exp(acc[i].a - x)) + 1.0;
          acc[i].a = x;
        } else if (std::isfinite(x)) {  // x <= a; a -inf or a second +inf adds nothing
          acc[i].b += std::exp(x - acc[i].a);
        }
      }
      break;
    default: break;
  }
}

void reduce_span(int32_t reduce, ReduceAcc& acc, const float* v, int64_t n) {
  if (n <= 0) return;
  if (reduce == FUSEDOPS_REDUCE_SUM || reduce == FUSEDOPS_REDUCE_MEAN) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += v[i];
    acc.a += s;
    return;
  }
  // Whole-span passes (vectorisable) instead of one update per element; NaN stays sticky as in torch.amin/amax.
  bool has_nan = false;
  for (int64_t i = 0; i < n; ++i) has_nan |= std::isnan(v[i]);
  if (reduce == FUSEDOPS_REDUCE_MIN || reduce == FUSEDOPS_REDUCE_MAX) {
    const bool is_min = reduce == FUSEDOPS_REDUCE_MIN;
    float best = v[0];
    if (is_min)
      for (int64_t i = 1; i < n; ++i) best = v[i] < best ? v[i] : best;
    else
      for (int64_t i = 1; i < n; ++i) best = v[i] > best ? v[i] : best;
    if (has_nan || std::isnan(acc.a))
      acc.a = std::numeric_limits<double>::quiet_NaN();
    else
      acc.a = is_min ? std::min(acc.a, static_cast<double>(best)) : std::max(acc.a, static_cast<double>(best));
    return;
  }
  if (reduce == FUSEDOPS_REDUCE_LOGSUMEXP) {
    if (std::isnan(acc.b)) return;  // an earlier NaN decides the result
    Eigen::Map<const Eigen::ArrayXf> x(v, n);
    const float m = has_nan ? 0.f : x.maxCoeff();
    if (!has_nan && std::isfinite(m) && std::isfinite(acc.a)) {  // the common case: merge (m, sum exp(x - m))
      const double sum = static_cast<double>((x - m).exp().sum());
      if (m > acc.a) {
        acc.b = acc.b * std::exp(acc.a - m) + sum;
        acc.a = m;
      } else {
        acc.b += sum * std::exp(static_cast<double>(m) - acc.a);
      }
      return;
    }
    if (!has_nan && std::isfinite(m) && acc.a == -std::numeric_limits<double>::infinity()) {
      acc.a = m;
      acc.b = static_cast<double>((x - m).exp().sum());
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) reduce_update(reduce, &acc, v + i, 1);  // NaN / ±inf: the exact online path
}

float reduce_final(int32_t reduce, const ReduceAcc& acc, int64_t count) {
  switch (reduce) {
    case FUSEDOPS_REDUCE_MEAN: return static_cast<float>(acc.a / static_cast<double>(count));
    case FUSEDOPS_REDUCE_LOGSUMEXP:
      if (std::isnan(acc.b)) return static_cast<float>(acc.b);
      if (std::isinf(acc.a)) return static_cast<float>(acc.a);  // all -inf -> -inf; any +inf -> +inf
      return static_cast<float>(acc.a + std::log(acc.b));
    default: return static_cast<float>(acc.a);
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Thread pool
// ---------------------------------------------------------------------------------------------------------------------

namespace {
thread_local const Scheduler* tls_scheduler = nullptr;
}  // namespace

ScopedScheduler::ScopedScheduler(const Scheduler* s) : prev_(tls_scheduler) { tls_scheduler = s; }
ScopedScheduler::~ScopedScheduler() { tls_scheduler = prev_; }

int num_threads() {
  if (tls_scheduler && tls_scheduler->threads > 0) return tls_scheduler->threads;
  // Never from the environment (kernel code reads none): callers that bound threads install a Scheduler.
  static const int n = [] {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw ? static_cast<int>(std::min(hw, 256u)) : 1;
  }();
  return n;
}

namespace {

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Returns false (and runs nothing) when another job holds the pool.
  bool try_run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
    if (!job.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_tasks_ = n_tasks;
      next_.store(0);
      error_ = nullptr;
      active_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return active_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void drain() {
    for (int64_t t; (t = next_.fetch_add(1)) < n_tasks_;) {
      try {
        (*fn_)(t);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
        next_.store(n_tasks_);  // stop handing out tasks
      }
    }
  }
  void worker() {
    uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
      std::lock_guard<std::mutex> lk(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex job_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool* pool() {
  // Function-local static: created on first use, joined when the library is unloaded or the process exits.
  static Pool p(num_threads() - 1);
  return &p;
}

}  // namespace

namespace {
// Runs tasks for a host scheduler; the first exception stays here (never unwinds into the host's threads).
struct HostJob {
  const std::function<void(int64_t)>* fn;
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mu;
  static void task(void* self, int64_t t) {
    HostJob* j = static_cast<HostJob*>(self);
    if (j->failed.load(std::memory_order_relaxed)) return;
    try {
      (*j->fn)(t);
    } catch (...) {
      std::lock_guard<std::mutex> lk(j->mu);
      if (!j->error) j->error = std::current_exception();
      j->failed.store(true);
    }
  }
};
}  // namespace

void parallel_for(int64_t n_tasks, const std::function<void(int64_t task)>& fn) {
  if (n_tasks <= 0) return;
  const Scheduler* s = tls_scheduler;
  if (s && s->threads == 1) {  // the host runs one thread: nothing to hand over
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  if (s) {
    // Tasks run on the host's threads, which do not see this thread's scheduler: nested calls use the pool/serial.
    HostJob job;
    job.fn = &fn;
    s->run(s->self, n_tasks, &HostJob::task, &job);
    if (job.error) std::rethrow_exception(job.error);
    return;
  }
  if (n_tasks > 1 && num_threads() > 1 && pool()->try_run(n_tasks, fn)) return;
  for (int64_t t = 0; t < n_tasks; ++t) fn(t);
}

void parallel_for(int64_t n_tasks, int64_t work, const std::function<void(int64_t task)>& fn) {
  if (work < kMinParallelWork) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  parallel_for(n_tasks, fn);
}

}  // namespace cpu
}  // namespace fusedops
