// A/B alternative, not a production path (llm.c's dev/ style): the pre-GroupNorm GELU through erff, the form the
// production gelu_fast (device_common.cuh) replaced. Selected only by the plan option gelu_erff
// (fusedops_plan_options / abi.PlanOptions), for tools/kernel_bench.py ab and the tests that compare the two.
#pragma once

#include "cuda/device_common.cuh"

namespace fusedops {
namespace cuda {
namespace dev {

template <int VEC>
__device__ __forceinline__ void pre_gelu_erff(float (&v)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) v[j] = apply_step(FUSEDOPS_STEP_GELU, v[j], 0.f, 0.f, 0.f);
}

}  // namespace dev
}  // namespace cuda
}  // namespace fusedops
