// The accumulator layout the GroupNorm epilogue (plugins/csrc/cuda/cutlass/gn_epilogue.cuh) relies on, checked on the
// host through CuTe (no GPU needed): for every math thread t and fragment index i of each kernel's TiledMma, the tile
// coordinate is (64*wg + 16*warp + lane/4 + 8*((i/2)%2), 2*(lane%4) + 8*(i/4) + i%2), i.e. a row lives in one quad of
// lanes and quad q of the fragment is the 8-column block q.
//   nvcc -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -Iplugins/include -Iplugins/csrc
//        -isystem third_party/cutlass/include tools/cutlass_layout_check.cu -o cutlass_layout_check
// For the 3xTF32 mainloop, also the shared-memory address of every value of each thread's register A fragment, which
// three_tf32_mainloop.cuh computes by hand, against CuTe's register-A partition and the stage's swizzled layout.
// Also checks, for every row of gemm_choice.h's tables (the kernels the library builds), that the kernel fits the
// 227 KiB of shared memory an sm_90 block may use and that CUTLASS's can_implement accepts the shapes the planner gives
// it (reference and odd ones).
// (tools/gpu/device_cutlass.sh runs it; exit 0 when every configuration passes.)
#include <cstdio>
#include <iterator>

#include "cuda/cutlass/fused_kernel.cuh"

using namespace fusedops::cuda::cutlass_gemm;
using fusedops::gemm_choice::Mode;

template <class K>
int check(const char* name) {
  using namespace cute;
  using TiledMma = typename K::Kernel::TiledMma;
  using TileShape = typename K::TileShape;
  TiledMma mma;
  int bad = 0, n = 0;
  for (int t = 0; t < int(size(TiledMma{})); ++t) {
    auto thr = mma.get_thread_slice(t);
    Tensor cD = make_identity_tensor(make_shape(size<0>(TileShape{}), size<1>(TileShape{})));
    Tensor tC = thr.partition_C(cD);
    auto frag = partition_fragment_C(mma, take<0, 2>(TileShape{}));
    if (size(frag) != size(tC)) { printf("%s: size mismatch\n", name); return 1; }
    const int wg = t / 128, warp = (t % 128) / 32, lane = t % 32;
    for (int i = 0; i < int(size(tC)); ++i) {
      auto c = tC(i);
      const int row = 64 * wg + 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
      const int col = 2 * (lane % 4) + 8 * (i / 4) + i % 2;
      ++n;
      if (int(get<0>(c)) != row || int(get<1>(c)) != col) {
        if (bad < 5)
          printf("%s: t=%d i=%d got (%d,%d) want (%d,%d)\n", name, t, i, int(get<0>(c)), int(get<1>(c)), row, col);
        ++bad;
      }
    }
  }
  using Kernel = typename K::Kernel;
  const int smem = int(Kernel::SharedStorageSize);
  const bool smem_ok = smem <= 227 * 1024;
  int rejected = 0;
  const int shapes[][3] = {{1024, 8192, 8192}, {1, 64, 40}, {1000, 320, 200}, {129, 768, 1024}, {3, 256, 8}};
  for (const auto& sh : shapes) {
    typename Kernel::Arguments a{};
    a.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    a.problem_shape = {sh[0], sh[1], sh[2], 1};
    a.mainloop.ptr_A = reinterpret_cast<typename Kernel::ElementA const*>(uintptr_t(256));
    a.mainloop.ptr_B = reinterpret_cast<typename Kernel::ElementB const*>(uintptr_t(256));
    a.mainloop.dA = make_stride(int64_t(sh[2]), Int<1>{}, int64_t(sh[0]) * sh[2]);
    a.mainloop.dB = make_stride(int64_t(sh[2]), Int<1>{}, int64_t(sh[1]) * sh[2]);
    a.epilogue.M = sh[0];
    a.epilogue.C = sh[1];
    a.epilogue.cg = 16;
    a.hw_info.sm_count = 132;
    if (!Kernel::can_implement(a) || Kernel::get_workspace_size(a) != 0) {
      printf("%s: can_implement rejects (or a workspace for) M=%d C=%d K=%d\n", name, sh[0], sh[1], sh[2]);
      ++rejected;
    }
  }
  printf("%s: %d threads, %d values checked, %d mismatches; shared memory %d bytes%s; %d shapes rejected\n", name,
         int(size(TiledMma{})), n, bad, smem, smem_ok ? "" : " (TOO LARGE)", rejected);
  return bad != 0 || !smem_ok || rejected != 0;
}

template <class K>
int check_three_tf32_a(const char* name) {
  using namespace cute;
  using Mainloop = typename K::Mainloop;
  using SmemLayoutA = typename Mainloop::SmemLayoutA;
  typename Mainloop::RegisterATiledMma mma;
  Tensor cA = make_identity_tensor(make_shape(size<0>(SmemLayoutA{}), size<1>(SmemLayoutA{})));
  int bad = 0, n = 0;
  // The stage layout is the swizzle (on shared-memory byte addresses: 16-byte chunk bits XOR 128-byte row bits) over
  // the element layout; evaluated on its own it would swizzle element offsets. The buffer starts on 128 bytes.
  for (int base = 0; base < 1024; base += 128)
    for (int t = 0; t < int(size(mma)); ++t) {
      Tensor tA = mma.get_thread_slice(t).partition_A(cA);  // (MMA, MMA_M, MMA_K) coordinates
      if (size<1>(tA) != 1) { printf("%s: %d m64 blocks a thread\n", name, int(size<1>(tA))); return 1; }
      const uint32_t thread_address = uint32_t(base) + Mainloop::a_thread_offset(t);
      const uint32_t row8 = Mainloop::a_row8(thread_address);
      for (int s = 0; s < int(size<2>(SmemLayoutA{})); ++s)
        for (int kb = 0; kb < int(size<2>(tA)); ++kb)
          for (int v = 0; v < int(size<0>(tA)); ++v) {
            auto c = tA(v, 0, kb);
            const int element = int(SmemLayoutA{}.layout_b()(get<0>(c), get<1>(c), s));
            const int want = int(SmemLayoutA{}.layout_a()(base + 4 * element));
            const int got = int(thread_address) + s * Mainloop::kStageABytes +
                            int(Mainloop::a_value_offset(row8, v, kb));
            ++n;
            if (want != got) {
              if (bad < 5)
                printf("%s: start %d t=%d v=%d kb=%d stage %d: byte %d, CuTe %d\n", name, base, t, v, kb, s, got,
                       want);
              ++bad;
            }
          }
    }
  printf("%s: register-A addresses, %d values checked, %d mismatches\n", name, n, bad);
  return bad != 0;
}

int main() {
  int rc = 0;
  // every row of gemm_choice.h's tables, as the kernel files instantiate it
  rc |= check<KernelOfConfig<Mode::TF32, 0>>("tf32 config 0");
  rc |= check<KernelOfConfig<Mode::TF32, 1>>("tf32 config 1");
  rc |= check<KernelOfConfig<Mode::TF32, 2>>("tf32 config 2");
  rc |= check<KernelOfConfig<Mode::BF16, 0>>("bf16 config 0");
  rc |= check<KernelOfConfig<Mode::BF16, 1>>("bf16 config 1");
  rc |= check<KernelOfConfig<Mode::BF16, 2>>("bf16 config 2");
  rc |= check<KernelOfConfig<Mode::FP16, 0>>("fp16 config 0");
  rc |= check<KernelOfConfig<Mode::THREE_TF32, 0>>("3xtf32 config 0");
  rc |= check<KernelOfConfig<Mode::THREE_TF32, 1>>("3xtf32 config 1");
  rc |= check<KernelOfConfig<Mode::THREE_TF32, 2>>("3xtf32 config 2");
  rc |= check<PresplitKernelOfConfig<0>>("3xtf32 presplit 0");
  rc |= check<PresplitKernelOfConfig<1>>("3xtf32 presplit 1");
  static_assert(fusedops::gemm_choice::config_count(Mode::TF32) == 3 &&
                    fusedops::gemm_choice::config_count(Mode::BF16) == 3 &&
                    fusedops::gemm_choice::config_count(Mode::FP16) == 1 &&
                    fusedops::gemm_choice::config_count(Mode::THREE_TF32) == 3,
                "a table row without a check above");
  static_assert(std::size(fusedops::gemm_choice::kThreeTf32PresplitConfigs) == 2, "a presplit row without a check");
  rc |= check_three_tf32_a<KernelOfConfig<Mode::THREE_TF32, 0>>("3xtf32 config 0");
  return rc;
}
