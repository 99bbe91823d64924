// Internal to convt_gn.cu: the normaliser kernel that runs behind the sm_90 wgmma convolution (plan option
// convt_normalisers), and what it needs of Hopper's bulk copies.
//
// Run after the convolution, the in-place normalise pass reads and writes all of Y once more: at model 4 (batch 128)
// 27-33 % of the op on an H100 with that pass at ~90 % of the copy bandwidth (2026-11-28), while the convolution
// moves ~1 TB/s and leaves the rest of the DRAM bandwidth unused. This kernel is launched right after the convolution
// with programmatic stream serialisation and the convolution triggers it at its start, so it runs on the SMs the
// convolution's grid leaves free: each block waits for the samples in order (the convolution counts every partial it
// writes in done[n]; `target` a sample), combines a sample's partials per group, then normalises its pieces (32 KB of
// a plane's 16-byte-aligned middle) r, r + R, ... in a ring of bulk copies into shared memory and back. The
// convolution never waits for it, so its waits end even where it cannot start early.
// Measured slower than the separate pass at every block count (H100 / H200, 2026-11-28: each normaliser SM moved
// ~25-60 GB/s, with threads' own loads as with this ring; keeping up needs ~100): an A/B option, off by default.
#pragma once

#include "cuda/convt_gn_blocks.cuh"
#include "cuda/convt_normalise.cuh"
#include "cuda/sm90/wgmma_ptx.cuh"

namespace fusedops {
namespace cuda {
namespace {

constexpr int kNormaliserThreads = 512;
constexpr int kNormaliserBufs = 6;                 // pieces in flight a block
constexpr uint32_t kNormaliserPiece = 32768;       // bytes a piece
constexpr int kNormaliserMaxGroups = 4096;         // (mean, rstd) of a sample's groups in shared memory
inline size_t normaliser_smem(int32_t groups) {
  return size_t(kNormaliserBufs) * (kNormaliserPiece + sizeof(uint64_t)) + size_t(groups) * sizeof(float2);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// The bulk-copy ring's load: arrive on the buffer's mbarrier expecting `bytes`, then the copy that pays them back.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  sm90::mbar_arrive_expect_tx(bar, bytes);
  sm90::bulk_copy(dst, src, bytes, bar);
}
__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(sm90::smem_u32(src)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
#endif

// A piece of sample n's Y: vectors [v0, v1) of plane c's 16-byte-aligned middle (empty: v0 >= v1).
template <typename T>
struct NormPiece {
  T* plane;
  int head;
  int64_t nvec, v0, v1;
};
template <typename T>
__device__ __forceinline__ NormPiece<T> norm_piece(T* ys, int64_t S, int64_t pieces, int64_t it) {
  constexpr int V = 16 / sizeof(T);
  NormPiece<T> q;
  q.plane = ys + it / pieces * S;
  q.head = plane_head(q.plane, S);
  q.nvec = (S - q.head) / V;
  q.v0 = it % pieces * (kNormaliserPiece / 16);
  q.v1 = min(q.nvec, q.v0 + kNormaliserPiece / 16);
  return q;
}

template <typename T>
__global__ void __launch_bounds__(kNormaliserThreads, 1) convt_normaliser_kernel(const __grid_constant__ ConvtParams p,
                                                                                 const uint32_t* done,
                                                                                 uint32_t target, int32_t batch) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char nsm[];
  uint64_t* full = reinterpret_cast<uint64_t*>(nsm + size_t(kNormaliserBufs) * kNormaliserPiece);
  float2* gstat = reinterpret_cast<float2*>(full + kNormaliserBufs);
  constexpr int V = 16 / sizeof(T);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, r = blockIdx.x, R = gridDim.x;
  const int64_t S = int64_t(p.hout) * p.wout, pbs = int64_t(p.tiles_h) * p.tiles_w;
  const int64_t pieces = ceil_div(convt_plane_vectors<T>(S), int64_t(kNormaliserPiece / 16));  // a plane's, at most
  const int64_t items = int64_t(p.cout) * pieces;
  const int tiles_per_group = int(ceil_div(p.cout_g, kTN));
  if (tid == 0) {
    for (int k = 0; k < kNormaliserBufs; ++k) sm90::mbar_init(full + k, 1);
    sm90::fence_proxy_async();
  }
  __syncthreads();
  uint32_t used = 0, issued = 0;  // non-empty pieces consumed (all threads) / loaded (thread 0): ring positions
  for (int64_t n = 0; n < batch; ++n) {
    T* ys = static_cast<T*>(p.y) + n * p.cout * S;
    int64_t next = r;  // thread 0: this block's next piece of the sample to load
    if (tid == 0) {
      while (load_acquire(done + n) < target) __nanosleep(256);
      asm volatile("fence.proxy.async;" ::: "memory");  // the bulk loads read what the acquire made visible
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // every buffer's last store has read it
      for (; next < items && issued - used < kNormaliserBufs; next += R) {
        const NormPiece<T> q = norm_piece(ys, S, pieces, next);
        if (q.v0 >= q.v1) continue;
        const int b = int(issued++ % kNormaliserBufs);
        bulk_load(nsm + size_t(b) * kNormaliserPiece, q.plane + q.head + q.v0 * V, uint32_t(q.v1 - q.v0) * 16u,
                  full + b);
      }
    }
    __syncthreads();
    for (int g = warp; g < p.G; g += kNormaliserThreads / 32) {  // Chan's combine, as convt_finish_kernel
      Welford w{0.f, 0.f, 0.f};
      const Welford* part = p.partials + (n * p.G + g) * pbs * p.tiles_c;
      for (int64_t i = lane; i < pbs * p.tiles_c; i += 32) {
        if (!tile_holds_group(p, int(i % p.tiles_c), g, tiles_per_group)) continue;
        const float* f = reinterpret_cast<const float*>(part + i);  // written by other SMs: past L1
        w = welford_combine(w, Welford{__ldcg(f), __ldcg(f + 1), __ldcg(f + 2)});
      }
      w = warp_welford(w);
      if (lane == 0) gstat[g] = make_float2(w.mean, rsqrtf(w.m2 / w.n + p.eps));
    }
    __syncthreads();
    for (int64_t it = r; it < items; it += R) {
      const NormPiece<T> q = norm_piece(ys, S, pieces, it);
      const int c = int(it / pieces);
      const float2 st = gstat[c / p.Cg];
      const float scale = st.y * load_param(p.gamma, p.param_dtype, c), shift = load_param(p.beta, p.param_dtype, c);
      if (it % pieces == 0)
        normalise_plane_ends(q.plane, S, q.head, q.nvec, tid, st.x, scale, shift, &p.post, c, &p.ex, p.param_dtype);
      if (q.v0 >= q.v1) continue;  // (uniform)
      const int b = int(used % kNormaliserBufs);
      sm90::mbar_wait(full + b, (used / kNormaliserBufs) & 1u);
      ++used;
      uint4* buf = reinterpret_cast<uint4*>(nsm + size_t(b) * kNormaliserPiece);
      for (int64_t k = tid; k < q.v1 - q.v0; k += kNormaliserThreads)
        buf[k] = normalise_vector<T>(buf[k], st.x, scale, shift, &p.post, c, &p.ex, p.param_dtype);
      sm90::fence_proxy_async();  // the bulk store reads what the threads wrote
      __syncthreads();
      if (tid == 0) {
        bulk_store(q.plane + q.head + q.v0 * V, buf, uint32_t(q.v1 - q.v0) * 16u);
        // The stores before this one have read their buffers: those of pieces up to used - 2 may be loaded again
        // (waiting for this store too serialised the ring: ~25 GB/s an SM, H100 2026-11-28).
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        for (; next < items && issued - used < kNormaliserBufs - 1; next += R) {
          const NormPiece<T> nq = norm_piece(ys, S, pieces, next);
          if (nq.v0 >= nq.v1) continue;
          const int nb = int(issued++ % kNormaliserBufs);
          bulk_load(nsm + size_t(nb) * kNormaliserPiece, nq.plane + nq.head + nq.v0 * V,
                    uint32_t(nq.v1 - nq.v0) * 16u, full + nb);
        }
      }
    }
    __syncthreads();  // gstat is the next sample's
  }
  if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#else
  __trap();  // unreachable: plans run it behind the sm_90 kernel only
#endif
}

template <typename T>
const void* normaliser_kernel() {
  return reinterpret_cast<const void*>(convt_normaliser_kernel<T>);
}

}  // namespace
}  // namespace cuda
}  // namespace fusedops
