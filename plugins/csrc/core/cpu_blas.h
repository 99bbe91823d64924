// The CPU GEMM's optional BLAS: an SGEMM loaded at run time (dlopen), Eigen's GEMM when none is loaded.
// Internal to the core; the C ABI entries are fusedops_set_cpu_blas / fusedops_cpu_blas (fusedops.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fusedops {
namespace cpu {

// cblas_sgemm's signature (CBLAS enums as int: 101 row-major, 111 no-trans, 112 trans).
using SgemmFn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc);

// The BLAS the CPU GEMM uses now, or nullptr for Eigen. The first call without an explicit choice searches the
// well-known system sonames once (libopenblas.so.0, libblis.so.4, libmkl_rt.so.2, ...). Thread-safe; a library once
// loaded is never unloaded (a GEMM in flight may still run in it).
SgemmFn blas_sgemm();

// Largest dimension the BLAS takes (its int arguments); bigger GEMMs use Eigen.
constexpr int64_t kBlasMaxDim = 2147483647;

// Choose the BLAS: nullptr = automatic search (as above), "eigen" = Eigen's GEMM, else a shared-library path or soname
// that exports cblas_sgemm (or scipy-openblas's scipy_cblas_sgemm). Returns 0, or non-zero with one line in err
// naming the path and the problem (the previous choice is then kept).
int set_blas(const char* path, char* err, size_t err_len);

// What the CPU GEMM uses, in words (runs the automatic search if nothing was chosen yet).
const char* blas_description();

}  // namespace cpu
}  // namespace fusedops
