// Small-spatial-size path of the CPU GroupNormAct (cpu_small_s.cpp). Not part of the ABI.
#pragma once

#include <cstdint>

#include "core/cpu_util.h"

namespace fusedops {
namespace cpu {

constexpr int64_t kSmallS = 32;  // S below this takes the small-S path (measured: docs/exporter.md, "CPU kernels")

// Whether groupnorm_small_s handles this descriptor (S < kSmallS and the expanded parameters fit 16 MiB).
bool use_small_s_path(const fusedops_groupnorm_desc& d, int32_t n_extras);
// GroupNormAct (with or without a channel reduction) over x into y; p holds the float32 per-channel vectors.
void groupnorm_small_s(const fusedops_groupnorm_desc& d, const void* x, const ChannelParams& p, void* y);

}  // namespace cpu
}  // namespace fusedops
