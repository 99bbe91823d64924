// The GroupNorm(+chains, +channel reduction) kernels: device code only, included by the one translation unit that
// plans and launches them (gn_plan.cu). Launch shapes and measurements: docs/kernels.md.
//
//  - gn_row_kernel      S == 1 (rank-2 input, the GEMM epilogue): one block per sample; the row lives in shared memory,
//                       so X is read once; group statistics are exact two-pass over shared memory.
//  - gn_row_reg_kernel  S == 1, small power-of-two groups: a row in registers, group statistics by lane shuffles.
//  - gn_row_tile_kernel S == 1, the same groups: a block keeps one column slice and walks several rows.
//  - gn_group_kernel    S > 1, one (sample, group) is L = C/G*S contiguous elements, split into P chunks:
//                       FUSED (P == 1): one block computes the statistics then applies (second read hits L1/L2);
//                       STATS + APPLY (P > 1): per-chunk (n, mean, M2) partials to the workspace, then an apply pass
//                       whose blocks combine their group's P partials with Chan's formula.
//                       X is read twice, Y written once.
//  - gn_onepass_kernel  the SPLIT case in one persistent launch that reads X once: each block takes the next chunk
//                       (an atomic ticket, so chunks start in group order), keeps pre(x) of it in shared memory,
//                       publishes its partial statistics, waits until all chunks of its group have, then normalises
//                       from shared memory. Planned only when the device keeps more resident blocks than a group has
//                       chunks (then the wait cannot deadlock: see the kernel).
//  - reduce over C with S > 1: STATS, gn_finalize_kernel ((mean, rstd) per group), gn_reduce_kernel (one thread per
//                       spatial position looping over channels; the normalised (N, C, S) tensor is never written).
//
// Every kernel here is a production kernel that the planner (gn_plan.cu) picks by condition (shape, groups, extras,
// device occupancy); the plan options also force them for A/B timing. Alternatives kept only for A/B timing live in
// dev/ (dev/gelu_erff.cuh), reachable only through fusedops_plan_options, never the environment.
#pragma once

#include "cuda/gn_group_kernels.cuh"
#include "cuda/gn_kernels_common.cuh"
#include "cuda/gn_row_kernels.cuh"
