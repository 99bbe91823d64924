// Run-time BLAS for the CPU GEMM (cpu_blas.h). Why dlopen rather than linking one: a static OpenBLAS adds ~25 MB of
// per-ISA kernels to every library, and a dynamic link would make the BLAS a hard dependency; loading it at run time
// keeps Eigen as the fallback wherever no BLAS exists, and lets the caller name the one to use (the Python layer
// passes the scipy-openblas32 wheel's library).
//
// Threads: the CPU kernels call the BLAS from their own pool's workers, one call per disjoint tile, so the BLAS must
// stay single-threaded inside a call (on two cores as fast as one two-thread BLAS call, and no BLAS threads compete
// with ORT's spinning intra-op workers; docs/exporter.md). The thread count is set to 1 through the loaded library's
// own entry (OpenBLAS, BLIS, MKL); this is process-wide for that library, which is why the project uses a BLAS copy
// of its own (scipy-openblas32).
#include "core/cpu_blas.h"

#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <deque>
#include <mutex>
#include <string>

#include "core/message.h"

namespace fusedops {
namespace cpu {
namespace {

struct Loaded {
  SgemmFn sgemm = nullptr;
  std::string description;
};

std::mutex g_mu;                            // guards the choice and the descriptions
std::atomic<SgemmFn> g_sgemm{nullptr};      // the GEMM hot path reads this (nullptr: Eigen)
std::atomic<bool> g_chosen{false};          // an explicit choice or the automatic search has happened
std::atomic<const char*> g_description{nullptr};
std::deque<std::string>& descriptions() {  // every description ever returned stays valid (callers keep the pointer)
  static std::deque<std::string> d;
  return d;
}
const char kEigen[] = "Eigen 3 GEMM (built in)";

void set_description_locked(const std::string& s) {
  descriptions().push_back(s);
  g_description.store(descriptions().back().c_str());
}

// Multiply a small known product and compare exactly (small integers are exact in float32): catches a library whose
// cblas_sgemm takes 64-bit integers (an ILP64 build) or is otherwise not the CBLAS we expect, before any user data.
bool self_test(SgemmFn f) {
  const int m = 3, n = 5, k = 4;
  float a[m * k], b[n * k], c[m * n], want[m * n];
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7 - 3);
  for (int i = 0; i < n * k; ++i) b[i] = static_cast<float>(i % 5 - 2);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float s = 0;
      for (int p = 0; p < k; ++p) s += a[i * k + p] * b[j * k + p];
      want[i * n + j] = s;
      c[i * n + j] = NAN;  // beta = 0 must overwrite, never read
    }
  f(101, 111, 112, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);  // row-major, C = A · Bᵀ
  for (int i = 0; i < m * n; ++i)
    if (c[i] != want[i]) return false;
  return true;
}

// dlopen `path` and find its SGEMM; on failure one line naming the path in *why.
bool load(const char* path, Loaded* out, std::string* why) {
  dlerror();
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    *why = std::string("cannot load CPU BLAS '") + path + "': " + (e ? e : "dlopen failed");
    return false;
  }
  // scipy-openblas renames every symbol with a scipy_ prefix (so it never clashes with another OpenBLAS).
  std::string prefix;
  void* sym = dlsym(h, "cblas_sgemm");
  if (!sym && (sym = dlsym(h, "scipy_cblas_sgemm"))) prefix = "scipy_";
  if (!sym) {
    *why = std::string("CPU BLAS '") + path + "' has no cblas_sgemm (nor scipy_cblas_sgemm) symbol";
    dlclose(h);
    return false;
  }
  const SgemmFn f = reinterpret_cast<SgemmFn>(sym);
  // One thread inside each call: our pool supplies the parallelism (see the top of this file).
  std::string kind = "CBLAS";
  if (void* s = dlsym(h, (prefix + "openblas_set_num_threads").c_str())) {
    reinterpret_cast<void (*)(int)>(s)(1);
    kind = "OpenBLAS";
    if (void* cfg = dlsym(h, (prefix + "openblas_get_config").c_str())) {
      const char* c = reinterpret_cast<const char* (*)()>(cfg)();
      if (c) kind += std::string(" (") + c + ")";
    }
  } else if (void* s2 = dlsym(h, "bli_thread_set_num_threads")) {
    reinterpret_cast<void (*)(long)>(s2)(1);
    kind = "BLIS";
  } else if (void* s3 = dlsym(h, "MKL_Set_Num_Threads")) {
    reinterpret_cast<void (*)(int)>(s3)(1);
    kind = "MKL";
  } else {
    kind += " (thread count not settable: it may start threads of its own)";
  }
  if (!self_test(f)) {
    *why = std::string("CPU BLAS '") + path + "': " + prefix + "cblas_sgemm gave a wrong product in a self-test "
           "(an ILP64 / 64-bit-integer build? use an LP64 BLAS)";
    dlclose(h);
    return false;
  }
  out->sgemm = f;
  out->description = kind + " from " + path;
  return true;  // the handle stays open for the process's lifetime
}

// Well-known sonames of optimised BLAS builds; not the generic libblas.so.3, which may be the slow reference BLAS.
const char* const kSystemBlas[] = {"libopenblas.so.0", "libopenblasp.so.0", "libblis.so.4", "libmkl_rt.so.2"};

void auto_search_locked() {
  for (const char* name : kSystemBlas) {
    Loaded l;
    std::string why;
    if (load(name, &l, &why)) {
      g_sgemm.store(l.sgemm);
      set_description_locked(l.description);
      g_chosen.store(true);
      return;
    }
  }
  g_sgemm.store(nullptr);
  set_description_locked(std::string(kEigen) + "; no system BLAS found");
  g_chosen.store(true);
}

void ensure_chosen() {
  if (g_chosen.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_chosen.load()) auto_search_locked();
}

}  // namespace

SgemmFn blas_sgemm() {
  ensure_chosen();
  return g_sgemm.load(std::memory_order_acquire);
}

const char* blas_description() {
  ensure_chosen();
  return g_description.load(std::memory_order_acquire);
}

int set_blas(const char* path, char* err, size_t err_len) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!path) {
    auto_search_locked();
    return 0;
  }
  if (std::string(path) == "eigen") {
    g_sgemm.store(nullptr);
    set_description_locked(kEigen);
    g_chosen.store(true);
    return 0;
  }
  if (!*path) {
    core::set_err(err, err_len, "CPU BLAS path is empty (give a library path, \"eigen\", or NULL for the search)");
    return 1;
  }
  Loaded l;
  std::string why;
  if (!load(path, &l, &why)) {
    core::set_err(err, err_len, "%s", why.c_str());
    return 1;
  }
  g_sgemm.store(l.sgemm);
  set_description_locked(l.description);
  g_chosen.store(true);
  return 0;
}

}  // namespace cpu
}  // namespace fusedops
