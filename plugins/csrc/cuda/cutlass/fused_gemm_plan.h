// The CUTLASS side of a GemmGroupNormAct plan as cuda_plan.cu sees it (no CUTLASS headers here: cuda_plan.cu is
// built for every architecture, the CUTLASS kernels for sm_90a only). Implemented by fused_gemm_plan.cu, or by
// fused_gemm_stub.cpp in a build without CUTLASS (then gemm_choice never picks it).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>

#include "cuda/cutlass/gemm_choice.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace cuda {
namespace cutlass_gemm {

struct FusedGemmPlan;
struct FusedGemmPlanDeleter {
  void operator()(FusedGemmPlan* p) const;
};
using FusedGemmPlanPtr = std::unique_ptr<FusedGemmPlan, FusedGemmPlanDeleter>;

// The one call cuda_plan.cu makes while planning a GemmGroupNormAct: asks gemm_choice (device traits of `device`,
// the current device, and the options) and, when it picks CUTLASS, plans the kernel into *out, raises *workspace to
// what it needs and puts its text before *kernels (the cuBLASLt path's, which stays planned for calls whose
// pointers the CUTLASS kernel cannot take). Leaves *out empty when another kernel is chosen; *chosen receives the
// fusedops_gemm_kernel picked (cuda_plan.cu plans the skinny kernel itself). Errors: a forced kernel that cannot
// run, a failed plan.
int plan_if_chosen(const fusedops_op_desc& d, const fusedops_plan_options& o, int device, FusedGemmPlanPtr* out,
                   size_t* workspace, std::string* kernels, int32_t* chosen, char* err, size_t err_len);

// Plans the kernel gemm_choice picked (choice.mode, choice.config) on the current device. *workspace: the bytes its
// runs need (the channel-reduction partials; 0 without a reduction), *text: the kernels it runs.
int make_fused_gemm_plan(const fusedops_op_desc& d, const gemm_choice::Choice& choice, int device, int sm_count,
                         FusedGemmPlanPtr* out, size_t* workspace, std::string* text, char* err, size_t err_len);

// Whether this call's pointers suit the planned kernel: X and W 16-byte aligned (TMA), Y aligned to a channel pair.
bool fused_gemm_accepts(const FusedGemmPlan& plan, const void* x, const void* w, const void* y);

// Bytes of W's prepared form the plan's kernel can take instead of W (3xTF32: W's TF32 hi part, then its lo part,
// each laid out as W: 2 C K float32 values); 0 when it takes none.
size_t fused_gemm_prepared_bytes(const FusedGemmPlan& plan);
// Enqueues the kernel that writes W's prepared form into `prepared` (16-byte aligned, fused_gemm_prepared_bytes).
cudaError_t prepare_fused_gemm_weights(const FusedGemmPlan& plan, const void* w, void* prepared, cudaStream_t stream);

// Enqueues the planned kernel (and, with a channel reduction, the finishing kernel). Inputs in node order; the
// workspace of at least *workspace bytes, any alignment. `prepared` (or null): W's prepared form, which the plan's
// presplit kernel then reads instead of W.
cudaError_t run_fused_gemm(const FusedGemmPlan& plan, const void* const* inputs, int32_t num_inputs,
                           const void* prepared, void* y, void* workspace, cudaStream_t stream);

}  // namespace cutlass_gemm
}  // namespace cuda
}  // namespace fusedops
