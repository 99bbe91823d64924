/*
 * fusedops C ABI: the one entry point every runtime adapter (PyTorch, ONNX Runtime, TensorRT) calls.
 *
 * How an adapter uses it (PyTorch ops, ONNX Runtime kernels, TensorRT plugins alike):
 *    fusedops_parse_attributes  once per node                 → op descriptor template
 *    fusedops_describe          once per input shape          → shapes checked, descriptor and output shape
 *    fusedops_plan_create       once per (shape, dtype, device) → launch configuration, cuBLASLt descriptors and
 *                                                                 algorithm, workspace size
 *    fusedops_plan_run          every call                    → enqueue only: no parsing, no checks beyond the
 *                                                                 pointers, no allocation, no synchronisation
 * Contract:
 *  - Plain C, raw pointers, caller-provided workspace (from the caller's allocator). Plans are immutable: calls on
 *    several streams / threads may share one. The only process-wide state is a per-device, lazily created,
 *    mutex-guarded cuBLASLt handle, which cuBLASLt documents as safe to share between threads and streams.
 *  - All tensors are dense, contiguous, row-major. X of GroupNormAct is (N, C, S) with S the product of spatial dims
 *    (S = 1 for rank 2). X of GemmGroupNormAct is (M, K) rows; W is (C, K) when trans_b = 1 (Linear layout),
 *    (K, C) when trans_b = 0.
 *  - Every function returns FUSEDOPS_OK (0) or an error code; errors are found before any launch where possible,
 *    and a message naming the problem is written into `err` (if err != NULL, err_len > 0).
 *
 * Semantics (identical to fusedops.catalog's PyTorch reference):
 *  GroupNormAct:      Y = reduce_C( post( GroupNorm( pre(X) ) ) )
 *  GemmGroupNormAct:  Y = reduce_C( post( GroupNorm( pre(X · Wᵀ + bias) ) ) )   (each row of the GEMM is a sample)
 *  GroupNorm: per sample n and group g (C/G consecutive channels): mean and biased variance over the group's
 *  channels and all S positions, float32 statistics; y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c].
 *  reduce_C (optional): min / max / sum / mean / logsumexp over C, keepdim → output (N, 1, S).
 */
#ifndef FUSEDOPS_FUSEDOPS_H_
#define FUSEDOPS_FUSEDOPS_H_

#include <stddef.h>
#include <stdint.h>

/* Generated from the op spec (fusedops/spec/ops.toml): limits (FUSEDOPS_MAX_STEPS, _EXTRAS, _RANK), the enums
 * fusedops_dtype, fusedops_op, fusedops_reduce and fusedops_step_op (every step's formula beside its code), step
 * predicates and the X-macro tables the parsers, checks and adapters are built from. */
#include "fusedops/fusedops_spec.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FUSEDOPS_API __declspec(dllexport)
#else
#define FUSEDOPS_API __attribute__((visibility("default")))
#endif

/* Forward declaration so this header does not need cuda_runtime.h; pass a cudaStream_t (or NULL = legacy). */
typedef struct CUstream_st* fusedops_stream_t;

typedef enum {
  FUSEDOPS_OK = 0,
  FUSEDOPS_ERR_INVALID_ARGUMENT = 1, /* shapes, attributes, divisibility, null pointers */
  FUSEDOPS_ERR_UNSUPPORTED = 2,      /* dtype / combination not implemented */
  FUSEDOPS_ERR_WORKSPACE = 3,        /* workspace smaller than the queried size */
  FUSEDOPS_ERR_CUDA = 4,             /* a CUDA / cuBLASLt call failed (message carries its text) */
  FUSEDOPS_ERR_NOT_BUILT = 5         /* called a CUDA entry in a build without CUDA */
} fusedops_status;

typedef struct {
  int32_t op;      /* fusedops_step_op */
  int32_t operand; /* binary steps: -1 = scalar `a`; k >= 0 = per-channel extra input k (length C) */
  float a;         /* scalar operand or first parameter */
  float b;         /* second parameter */
} fusedops_step;

typedef struct {
  int32_t num_steps;
  fusedops_step steps[FUSEDOPS_MAX_STEPS];
} fusedops_chain;

/* Parse the catalog's chain text (the `pre` / `post` ONNX attribute), e.g. "add(@0);hardtanh(-1,1);mish".
 * Grammar: chain := "" | step (";" step)* ; step := name [ "(" arg ("," arg)* ")" ] ; arg := float | "@"k | "inf".
 * Unknown names, wrong arity, malformed numbers or more than FUSEDOPS_MAX_STEPS steps → INVALID_ARGUMENT. */
FUSEDOPS_API int fusedops_parse_chain(const char* text, fusedops_chain* out, char* err, size_t err_len);
/* "" | "min" | "max" | "sum" | "mean" | "logsumexp" */
FUSEDOPS_API int fusedops_parse_reduce(const char* text, int32_t* out, char* err, size_t err_len);
/* Largest extra-input index referenced by the two chains, plus one (0 if none). */
FUSEDOPS_API int32_t fusedops_num_extras(const fusedops_chain* pre, const fusedops_chain* post);

typedef struct {
  int64_t N;           /* samples (GemmGroupNormAct: rows M) */
  int64_t C;           /* channels */
  int64_t S;           /* product of spatial dims, >= 1 (GemmGroupNormAct: 1) */
  int32_t num_groups;  /* C % num_groups == 0 */
  float epsilon;
  fusedops_chain pre;
  fusedops_chain post;
  int32_t reduce;      /* fusedops_reduce */
  int32_t x_dtype;     /* dtype of X and Y */
  int32_t param_dtype; /* dtype of gamma, beta, bias and the extras */
} fusedops_groupnorm_desc;

typedef struct {
  fusedops_groupnorm_desc gn; /* gn.N = rows M, gn.C = output features, gn.S = 1 */
  int64_t K;                  /* input features */
  int32_t trans_b;            /* 1: W is (C, K); 0: W is (K, C) */
  int32_t allow_tf32;         /* float32 GEMM only: 1 = TF32 tensor cores, 0 = strict FP32 */
  /* W has x_dtype; 16-bit X runs the GEMM in that type with float32 accumulation. */
} fusedops_gemm_desc;

/* ---- Ops, attributes and shape rules (one set, behind the ABI, for every adapter) -------------------------------- */

/* The transposed convolution of ConvTransposeGroupNormAct (ONNX ConvTranspose semantics, explicit pads; auto_pad and
 * output_shape are resolved by the exporter). X is (N, in_channels, *input), W is (in_channels, C / group, *kernel),
 * B (optional) has C elements; Y is (N, C, *output) with, per spatial dim i,
 *   output[i] = strides[i] * (input[i] - 1) + output_padding[i] + dilations[i] * (kernel[i] - 1) + 1
 *               - pads_begin[i] - pads_end[i].
 * Unused trailing dims (i >= spatial_rank) are 1 / 0 as for a size-1 dimension. */
typedef struct {
  int32_t spatial_rank; /* 1 or 2 */
  int32_t group;        /* convolution groups: in_channels % group == 0 and C % group == 0 */
  int64_t in_channels;
  int64_t input[3];  /* input spatial sizes */
  int64_t output[3]; /* output spatial sizes; gn.S is their product */
  int32_t kernel[3];
  int32_t strides[3];
  int32_t pads_begin[3];
  int32_t pads_end[3];
  int32_t output_padding[3];
  int32_t dilations[3];
  int32_t channels_last; /* 1: X is (N, *input, in_channels) and Y (N, *output, C) in memory (PyTorch channels_last);
                            ONNX Runtime and TensorRT pass 0 */
} fusedops_conv_desc;

/* ConvTransposeGroupNormAct (issue 13, FUSEDOPS_OP_CONVTRANSPOSE_GROUPNORM_ACT in the generated fusedops_op enum):
 * fusedops_parse_attributes (with fusedops_conv_attributes) and fusedops_describe complete its descriptor (op, d.gn,
 * d.allow_tf32, conv), which makes CPU and CUDA plans; the ONNX Runtime and TensorRT adapters register it
 * (FUSEDOPS_ORT_OPS / FUSEDOPS_TENSORRT_OPS). */

/* One node of any op: GroupNormAct uses d.gn only (d.K = 0, trans_b = 1, allow_tf32 = 1); GemmGroupNormAct d.gn and
 * d's GEMM fields; ConvTransposeGroupNormAct d.gn (N = batch, C = output channels, S = product of conv.output),
 * d.allow_tf32 (float32 X: 1 = TF32 tensor cores, 0 = float32-accurate) and conv. */
typedef struct {
  int32_t op; /* fusedops_op */
  fusedops_gemm_desc d;
  fusedops_conv_desc conv; /* ConvTransposeGroupNormAct only; zero otherwise */
} fusedops_op_desc;

/* ConvTransposeGroupNormAct's convolution attributes, as ONNX ConvTranspose's INTS attributes: each list a pointer
 * and its length; a NULL / empty list takes ONNX's default (kernel_shape: W's spatial dims; strides and dilations: 1;
 * pads (begins, then ends) and output_padding: 0). Given lists must agree on the spatial rank (1 or 2). auto_pad and
 * output_shape are not attributes of the fused op: the exporter resolves them into pads. */
typedef struct {
  const int64_t* kernel_shape;
  int32_t num_kernel_shape;
  const int64_t* strides;
  int32_t num_strides;
  const int64_t* pads;
  int32_t num_pads;
  const int64_t* output_padding;
  int32_t num_output_padding;
  const int64_t* dilations;
  int32_t num_dilations;
  int64_t group; /* >= 1 */
} fusedops_conv_attributes;

/* A node's attributes as text and numbers, exactly as on the ONNX node and in the PyTorch op's schema. */
typedef struct {
  int32_t op;         /* fusedops_op */
  int64_t num_groups; /* > 0 */
  float epsilon;      /* finite, >= 0 */
  const char* pre;    /* chain text; NULL = "" */
  const char* post;
  const char* reduce; /* "" | min | max | sum | mean | logsumexp; NULL = "" */
  int32_t trans_b;    /* GemmGroupNormAct: 1 = W is (C, K), 0 = (K, C); ignored by GroupNormAct */
  int32_t allow_tf32; /* GemmGroupNormAct, ConvTransposeGroupNormAct, float32 X: 1 = TF32 tensor cores, 0 = float32
                         accuracy */
  const fusedops_conv_attributes* conv; /* ConvTransposeGroupNormAct: required; ignored by the other ops */
} fusedops_attributes;

/* Parse and validate attributes once: *out gets op, num_groups, epsilon, chains, reduce, trans_b, allow_tf32 (and for
 * ConvTransposeGroupNormAct the convolution's group, strides, pads, output_padding, dilations and any kernel_shape in
 * out->conv, with the spatial rank when a list gives it); its shape and dtype fields are set to -1 (unknown) until
 * fusedops_describe fills them. */
FUSEDOPS_API int fusedops_parse_attributes(const fusedops_attributes* attrs, fusedops_op_desc* out, char* err,
                                           size_t err_len);

/* Tensor ranks the ops accept: FUSEDOPS_*_X_MIN_RANK .. FUSEDOPS_*_X_MAX_RANK (fusedops_spec.h). */
#define FUSEDOPS_DTYPE_UNKNOWN (-1)

/* A tensor as an adapter sees it: dtype (fusedops_dtype, or FUSEDOPS_DTYPE_UNKNOWN), rank (< 0: unknown) and dims
 * (< 0: that dimension is unknown, e.g. a dynamic batch while a graph is being built). */
typedef struct {
  int32_t dtype;
  int32_t rank;
  int64_t dims[FUSEDOPS_MAX_RANK];
} fusedops_tensor_desc;

/* The ops' shape and dtype rules. Inputs in node order: GroupNormAct X, gamma, beta, extras...; GemmGroupNormAct
 * and ConvTransposeGroupNormAct X, W, B (may be absent: dtype unknown, rank -1), gamma, beta, extras....
 * ConvTransposeGroupNormAct: X (N, Cin, *spatial) with 1 or 2 spatial dims, W (Cin, C / group, *kernel), ONNX
 * ConvTranspose's output size (in conv.output; gn.S is their product) and limits; fills d->conv completely.
 * Ranks; W against X's K and trans_b; every per-channel input (B, gamma, beta,
 * extras) with C elements and one dtype of its own (float32, or X's dtype); W of X's dtype; the number of extras
 * (at least what the chains reference, at most FUSEDOPS_MAX_EXTRAS); C divisible by num_groups; sizes within the
 * kernels' limits. What is unknown is not checked: *d (from fusedops_parse_attributes) gets N, C, S, K and the
 * dtypes, -1 where still unknown, and *output the output's dtype and shape (dims -1 where unknown).
 * N = 0 or a spatial size 0 (an empty batch) is valid; so is K = 0 (Y then depends on B only). */
FUSEDOPS_API int fusedops_describe(fusedops_op_desc* d, const fusedops_tensor_desc* inputs, int32_t num_inputs,
                                   fusedops_tensor_desc* output, char* err, size_t err_len);

/* ---- Plans: everything that depends only on (attributes, shapes, dtypes, device), made once -------------------- */

/* Opaque. Immutable once created: runs on several threads and streams may share one plan. */
typedef struct fusedops_plan fusedops_plan;

/* Kernel variants kept for A/B timing and for the tests that compare them. A testing entry point: production
 * adapters pass NULL (= every field 0 = the measured-fastest choice of the planner). */
typedef struct {
  int32_t gelu_erff;          /* 1: GELU through erff instead of the polynomial + ex2 form */
  int32_t groupnorm_two_pass; /* 1: never the one-pass (persistent) kernel for large groups */
  int32_t epilogue_register;  /* 1: the one-row register epilogue instead of the column-slice one */
  int32_t epilogue_rows;      /* > 0: rows a column-slice epilogue block walks (1..16) */
  int32_t lt_workspace_mib;   /* > 0: cuBLASLt workspace cap in MiB (default 4) */
  float l2_wave_fraction;     /* > 0: run the two-pass GroupNorm in waves of this fraction of L2 */
  int32_t gemm_kernel;        /* GemmGroupNormAct: a fusedops_gemm_kernel (0 = the planner's choice); a forced kernel
                                 that cannot run the descriptor fails plan creation with the reason */
  int32_t fp32_gemm;          /* float32 X with allow_tf32 = 0: 0 = the planner's choice, 1 = strict FP32 (cuBLASLt),
                                 2 = 3xTF32 (CUTLASS, sm_90) */
  int32_t cutlass_config;     /* k > 0: the k-th CUTLASS tile configuration of the mode (A/B timing); 0 = default */
  int32_t reduce_whole_row;   /* 1: a channel reduction over S == 1 rows keeps each row in one block (the layout
                                 before sm_90) instead of slices combined by a thread-block cluster */
  int32_t direct_launches;    /* 1: GemmGroupNormAct launches its GEMM and epilogue each call instead of replaying a
                                 CUDA graph of them per pointer set (captured at a set's second call) */
  int32_t convt_kernel;       /* ConvTransposeGroupNormAct: a fusedops_convt_kernel (0 = the planner's choice); a forced
                                 kernel that cannot run the descriptor fails plan creation with the reason */
  int32_t convt_blocks;       /* the wgmma convolution's persistent grid: k > 0 = at most k blocks (a cap above the tile
                                 count runs one tile a block, the grid before persistence); 0 = one block an SM */
  int32_t convt_ring_producer; /* 1: the wgmma convolution stages float32 TF32 X through a ring of raw chunks
                                  (cp.async) where it fits; 0 = through registers (measured faster, H200 2026-11-27) */
  int32_t convt_normalisers;  /* the wgmma convolution's in-place normalise: k > 0 = a second kernel of k blocks
                                 normalises each sample while the convolution runs on the other SMs (A/B; measured
                                 slower, 2026-11-28); 0 or -1 = separate kernels after the convolution */
} fusedops_plan_options;

/* ---- The convolution of ConvTransposeGroupNormAct: which kernel a plan runs ------------------------------------ */
typedef enum {
  FUSEDOPS_CONVT_AUTO = 0,  /* options only: the planner's choice (wgmma where it applies, else the implicit GEMM) */
  FUSEDOPS_CONVT_IGEMM = 1, /* the mma.sync implicit GEMM (every shape, sm_80 and later) */
  FUSEDOPS_CONVT_WGMMA = 2  /* sm_90: wgmma with both operands in shared memory (float32 X with TF32 products, stride
                               1, one convolution group, output channels a multiple of 64, input channels of 8) */
} fusedops_convt_kernel;

/* ---- The GEMM of GemmGroupNormAct: which kernel a plan runs ---------------------------------------------------- */

typedef enum {
  FUSEDOPS_GEMM_AUTO = 0,     /* options only: the planner's choice */
  FUSEDOPS_GEMM_CUBLASLT = 1, /* cuBLASLt GEMM (bias in its epilogue where offered), then the GroupNorm kernel */
  FUSEDOPS_GEMM_CUTLASS = 2,  /* one CUTLASS sm_90 kernel, GroupNorm in its epilogue (a channel reduction adds a
                                 tiny finishing kernel); float32 X runs TF32, or 3xTF32 when allow_tf32 = 0 */
  FUSEDOPS_GEMM_SKINNY = 3    /* M <= 16 rows: a kernel streaming W through the CUDA cores (float32 accumulation,
                                 strict FP32 for float32 X), then the GroupNorm kernel */
} fusedops_gemm_kernel;

/* The device traits the choice depends on. */
typedef struct {
  int32_t cc_major, cc_minor; /* compute capability */
  int32_t sm_count;           /* multiprocessors */
  int32_t has_cutlass;        /* the library has the CUTLASS kernels (fusedops_has_cutlass()) */
} fusedops_gemm_device;

/* The planner's rule, as a pure function (plans call it; tests check it without a GPU): *kernel gets the
 * fusedops_gemm_kernel a plan of the complete GemmGroupNormAct descriptor `d` runs on `dev` with `options` (NULL =
 * defaults) and `why` one line saying why. FUSEDOPS_ERR_UNSUPPORTED when the options force a kernel or precision
 * that cannot run here (why = the reason), FUSEDOPS_ERR_INVALID_ARGUMENT for another op or an incomplete descriptor.
 * A plan may still run the cuBLASLt path for a call whose pointers the CUTLASS kernel cannot take (alignment). */
FUSEDOPS_API int fusedops_gemm_kernel_choice(const fusedops_op_desc* d, const fusedops_gemm_device* dev,
                                             const fusedops_plan_options* options, int32_t* kernel, char* why,
                                             size_t why_len);
/* 1 if this library has the CUTLASS sm_90 kernels. */
FUSEDOPS_API int fusedops_has_cutlass(void);

/* device >= 0: a CUDA device ordinal (pointers at run are device memory); FUSEDOPS_DEVICE_CURRENT: the CUDA device
 * current on the calling thread (for adapters that do not track devices, e.g. TensorRT plugins);
 * FUSEDOPS_DEVICE_CPU: host pointers. Plan creation may query the device and cuBLASLt's heuristic and set kernel
 * attributes; runs never do. */
#define FUSEDOPS_DEVICE_CPU (-1)
#define FUSEDOPS_DEVICE_CURRENT (-2)
FUSEDOPS_API int fusedops_plan_create(const fusedops_op_desc* d, int32_t device, const fusedops_plan_options* options,
                                      fusedops_plan** out, char* err, size_t err_len);
FUSEDOPS_API void fusedops_plan_destroy(fusedops_plan* plan);
/* Workspace bytes a run needs (0 is a valid answer); the run takes any buffer at least this large. */
FUSEDOPS_API size_t fusedops_plan_workspace_size(const fusedops_plan* plan);
/* Which kernels the plan runs, e.g. "cublaslt(bias) + gn_row_tile(rows=8)": for tests and reports. */
FUSEDOPS_API const char* fusedops_plan_kernels(const fusedops_plan* plan);
/* The op's descriptor the plan was made for. */
FUSEDOPS_API const fusedops_op_desc* fusedops_plan_desc(const fusedops_plan* plan);

/* Run: inputs in node order (as for fusedops_describe; GemmGroupNormAct's B may be NULL = no bias), y the output,
 * a workspace of at least fusedops_plan_workspace_size bytes (any alignment). CUDA plans enqueue on `stream` (the
 * plan's device must be current) and neither allocate, synchronise nor query anything: safe inside CUDA-graph
 * capture. CPU plans run on the calling thread and the core's worker pool (stream ignored). */
FUSEDOPS_API int fusedops_plan_run(const fusedops_plan* plan, const void* const* inputs, int32_t num_inputs, void* y,
                                   void* workspace, size_t workspace_size, fusedops_stream_t stream, char* err,
                                   size_t err_len);

/* ---- Prepared weights: W transformed once, for plans that can use it (constant weights) ------------------------
 * A GemmGroupNormAct plan running 3xTF32 (float32 X, allow_tf32 = 0, the CUTLASS kernel) splits every W tile into
 * its TF32 high and low parts in every call. W is a constant in inference (ORT / TensorRT initialisers, a module's
 * parameters between updates), so the split can be done once: fusedops_plan_prepare_weights writes W's TF32 high
 * part and then its low part (2 C K float32 values; the same bits the kernel's own split gives, so results are
 * identical) into a buffer the caller owns, and fusedops_plan_run_prepared reads them instead of W. The form depends
 * on W's values only: plans of other batch sizes of the same op share it. The caller keeps it in step with W
 * (prepare again after changing W): a stale buffer gives results of the old weights.
 * Size in bytes; 0 when the plan takes no prepared weights (any other plan: then there is nothing to prepare). */
FUSEDOPS_API size_t fusedops_plan_prepared_weights_size(const fusedops_plan* plan);
/* Enqueues on `stream` the writing of W's prepared form (W as the plan's W input: device memory, 16-byte aligned)
 * into `prepared` (device memory of at least fusedops_plan_prepared_weights_size bytes, 16-byte aligned). Refused
 * (FUSEDOPS_ERR_UNSUPPORTED) while `stream` is being captured into a CUDA graph: prepare before capture. */
FUSEDOPS_API int fusedops_plan_prepare_weights(const fusedops_plan* plan, const void* w, void* prepared,
                                               size_t prepared_size, fusedops_stream_t stream, char* err,
                                               size_t err_len);
/* fusedops_plan_run with W's prepared form. `inputs` still holds W: a call whose other pointers the CUTLASS kernel
 * cannot take runs the cuBLASLt path on W. prepared = NULL, or a plan whose prepared size is 0, is
 * fusedops_plan_run. */
FUSEDOPS_API int fusedops_plan_run_prepared(const fusedops_plan* plan, const void* const* inputs, int32_t num_inputs,
                                            const void* prepared, void* y, void* workspace, size_t workspace_size,
                                            fusedops_stream_t stream, char* err, size_t err_len);

/* Workspace bytes a production plan of this (complete) descriptor needs on any device: what a TensorRT engine
 * reserves. Pure function of the descriptor. 0 for an invalid descriptor. */
FUSEDOPS_API size_t fusedops_workspace_size(const fusedops_op_desc* d);

/* ---- Lower-level entries the plans are made of ----------------------------------------------------------------- */

/* Validate a complete descriptor (shapes >= 0, divisibility, chains, dtypes). */
FUSEDOPS_API int fusedops_groupnorm_act_check(const fusedops_groupnorm_desc* d, char* err, size_t err_len);
FUSEDOPS_API int fusedops_gemm_groupnorm_act_check(const fusedops_gemm_desc* d, char* err, size_t err_len);

/* CPU kernels (host pointers; multithreaded; float32 / float16 / bfloat16 with float32 math). */
FUSEDOPS_API int fusedops_groupnorm_act_cpu(const fusedops_groupnorm_desc* d, const void* x, const void* gamma,
                                            const void* beta, const void* const* extras, int32_t num_extras,
                                            void* y, char* err, size_t err_len);
FUSEDOPS_API int fusedops_gemm_groupnorm_act_cpu(const fusedops_gemm_desc* d, const void* x, const void* w,
                                                 const void* bias, const void* gamma, const void* beta,
                                                 const void* const* extras, int32_t num_extras, void* y,
                                                 char* err, size_t err_len);

/* The CPU GEMM's BLAS (GemmGroupNormAct on the CPU). By default the first CPU GEMM searches well-known system BLAS
 * sonames (libopenblas.so.0, libblis.so.4, libmkl_rt.so.2, ...) and uses Eigen's GEMM when none loads.
 * path: a shared library (path or soname) exporting an LP64 cblas_sgemm (or scipy-openblas's scipy_cblas_sgemm);
 * "eigen" for Eigen's GEMM; NULL to rerun the search. The library is set to one thread per call (the kernels'
 * pool runs calls on disjoint tiles). Returns FUSEDOPS_OK, or FUSEDOPS_ERR_INVALID_ARGUMENT with one line naming the
 * path and the problem (the previous choice is kept). Process-wide for this copy of the library. */
FUSEDOPS_API int fusedops_set_cpu_blas(const char* path, char* err, size_t err_len);
/* What the CPU GEMM uses, in words (e.g. "OpenBLAS (...) from PATH"); valid for the process's lifetime. */
FUSEDOPS_API const char* fusedops_cpu_blas(void);

/* 1 if this build has the CUDA entries. */
FUSEDOPS_API int fusedops_has_cuda(void);
FUSEDOPS_API const char* fusedops_version(void);

#ifdef __cplusplus
}
#endif
#endif /* FUSEDOPS_FUSEDOPS_H_ */
