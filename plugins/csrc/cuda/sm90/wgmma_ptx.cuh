// Hopper (sm_90a) PTX wrappers the hand-written wgmma kernels use: mbarriers, cp.async with an mbarrier arrival, the
// bulk copy engine, and the warpgroup MMA with its shared-memory descriptors. Device code for sm_90a only.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <type_traits>

namespace fusedops {
namespace cuda {
namespace sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// ---- mbarriers (CTA scope) ----
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// Arrives and adds `bytes` to the transaction count the phase waits for (a bulk copy's complete_tx pays it back).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// Named barrier `id` over `threads` threads (a multiple of 32): one warpgroup or role syncs without the others.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Moves registers between warpgroups (each warp of a warpgroup executes it): a role that needs few gives them back,
// one that needs many takes them, within the block's allocation at launch.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// ---- copies ----
// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy reads (wgmma, bulk copy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Bulk copy (TMA engine, no tensor map): `bytes` (multiple of 16, both addresses 16-byte aligned) completing on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// cp.async of 16 bytes global -> shared, through L2 only (X is streamed; its halo rows are re-read from L2), and
// the per-thread groups that order them: a thread waits for its own copies only.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ---- warpgroup MMA ----
// Shared-memory matrix descriptor, no swizzle: the operand is made of 8-row x 16-byte core matrices (each 128
// contiguous bytes); `lbo` is the byte distance between core matrices along K, `sbo` between groups of 8 rows.
__device__ __forceinline__ uint64_t gmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((saddr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32);
}
// Pins the accumulators in their registers around the MMAs, as CUTLASS's warpgroup_fence_operand does. Added while
// ptxas serialised the persistent kernel's MMAs (C7520); what cured that was the kernel-start loop
// (convt_wgmma.cu), and the kernel compiles without C7520 and with the same spills either way (checked
// 2026-11-27). Kept because every measured run had it.
template <int N>
__device__ __forceinline__ void fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

#define FUSEDOPS_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FUSEDOPS_D16(i) FUSEDOPS_D4(i), FUSEDOPS_D4(i + 4), FUSEDOPS_D4(i + 8), FUSEDOPS_D4(i + 12)
// Half of an m64n256 tile, both operands from shared-memory descriptors (K-major; TAIL holds the 16-bit types'
// transpose immediates, 0): D(64 x 128, fp32) += A(64 x K) * B(K x 128) into d[64 h .. 64 h + 64), desc_b already at
// the half's first column, K = 8 (TF32) or 16. Thread t of the warpgroup holds rows 16 * (t / 32) + (t % 32) / 4 + 8 i
// and columns 8 j + 2 (t % 4) + e of the m64n256 tile in d[4 j + 2 i + e], as one m64n256 would. A block of 512
// threads launches with 128 registers a thread, and ptxas (13.0) refuses one instruction needing more even after
// setmaxnreg raised the consumers' limit: two n128 MMAs a tap instead of one n256.
#define FUSEDOPS_WGMMA_D64                                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                             \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FUSEDOPS_WGMMA_N128(SHAPE_TYPES, TAIL)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                    \
               "wgmma.mma_async.sync.aligned." SHAPE_TYPES " " FUSEDOPS_WGMMA_D64 ", %64, %65, p, 1, 1" TAIL    \
               ";\n}"                                                                                             \
               : FUSEDOPS_D16(64 * H), FUSEDOPS_D16(64 * H + 16), FUSEDOPS_D16(64 * H + 32),                     \
                 FUSEDOPS_D16(64 * H + 48)                                                                       \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
// N: the accumulator array's size, 128 (two halves) or 64 (one: the 3xTF32 kernel's fresh and running sums).
template <int H, int N>
__device__ __forceinline__ void wgmma_m64n128k8_tf32(float (&d)[N], uint64_t desc_a, uint64_t desc_b,
                                                     uint32_t scale_d = 1) {
  static_assert(64 * (H + 1) <= N, "the half must lie in the accumulators");
  FUSEDOPS_WGMMA_N128("m64n128k8.f32.tf32.tf32", "");
}
template <int H, typename T, int N>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[N], uint64_t desc_a, uint64_t desc_b,
                                                 uint32_t scale_d = 1) {
  static_assert(64 * (H + 1) <= N, "the half must lie in the accumulators");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) FUSEDOPS_WGMMA_N128("m64n128k16.f32.bf16.bf16", ", 0, 0");
  else FUSEDOPS_WGMMA_N128("m64n128k16.f32.f16.f16", ", 0, 0");
}
#undef FUSEDOPS_WGMMA_N128
#undef FUSEDOPS_WGMMA_D64
#undef FUSEDOPS_D16
#undef FUSEDOPS_D4

}  // namespace sm90
}  // namespace cuda
}  // namespace fusedops
