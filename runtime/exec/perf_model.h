/* What the hardware allows a node: its FLOPs and bytes from the shapes and dtypes of the graph
 * (host only), the peaks of a GPU by name, and the profile table that sets each op's measured
 * time against that ceiling (FP8RUN_PROFILE; runtime/cuda/cuda_exec.c supplies the times).
 *
 *   FLOPs  GEMMs and attention only (2 per multiply-add), everything else 0:
 *            Linear          2 M N K        (M tokens, K in, N out features)
 *            LinearGradData  2 M N K        LinearGradWeight 2 M N K
 *            MatMul, Gemm    2 x numel(Y) x K
 *            Attention       2 x batch x pairs x (D + Dv)       (batch: Q's dims before Tq)
 *            AttentionGrad   2 x batch x pairs x (3 D + 2 Dv)   (S again, dP, dV, dQ, dK)
 *          pairs: the (query, key) pairs not masked: Tq Tk, T (T + 1) / 2 causal, fewer with a
 *          window. Their math (what peak applies): the node's precision attribute (fp8, bf16,
 *          fp32), else its input dtype.
 *   bytes  each distinct input and output value once (numel x dtype size): the traffic of a
 *          kernel that reads every input and writes every output exactly once, a lower bound
 *          (a kernel's scratch, e.g. an fp8 Linear's quantized operands, is not counted). Views
 *          (Reshape, Squeeze, Unsqueeze, Flatten, Identity) move nothing.
 *   ceiling  max(FLOPs / peak of its math, bytes / memory bandwidth): the least time the
 *          node can take; "% of ceiling" = ceiling / measured time. */
#ifndef FR_RUNTIME_PERF_MODEL_H
#define FR_RUNTIME_PERF_MODEL_H

#include "graph/ir.h"

typedef enum fr_math {
    FR_MATH_NONE = 0, /* no FLOPs counted: bound by memory */
    FR_MATH_FP32,     /* float32 FMA (cuBLASLt CUBLAS_COMPUTE_32F on float32: no tensor cores) */
    FR_MATH_FP64,
    FR_MATH_BF16,     /* bf16 / fp16 tensor cores, dense */
    FR_MATH_FP8,      /* fp8 tensor cores, dense */
    FR_MATH_COUNT
} fr_math;

typedef struct fr_node_cost {
    double flops, bytes;
    fr_math math;
} fr_node_cost;

/* The cost of node n of g (shapes must be inferred; unknown dims count as 0). */
void fr_node_cost_of(const fr_graph *g, const fr_node *n, fr_node_cost *out);

/* Dense peaks: FLOP/s per math (0: unknown) and memory bytes/s. */
typedef struct fr_device_peaks {
    double flops[FR_MATH_COUNT];
    double bytes_per_s;
    char source[96]; /* "table: NVIDIA H200", "FP8RUN_DEVICE_PEAKS", "unknown device" */
} fr_device_peaks;

/* The peaks of a device from its name (the table: H100 SXM / PCIe / NVL, H200, GH200, A100,
 * L40S), then FP8RUN_DEVICE_PEAKS="bf16=989,fp8=1979,fp32=67,fp64=67,tbs=3.35" (TFLOP/s and
 * TB/s; any subset) over it. A malformed variable is FR_ERR_INVALID_ARG naming it. */
FR_NODISCARD fr_status fr_device_peaks_for(const char *device, fr_device_peaks *p);

/* The ceiling of a cost in ms (0 when the peaks say nothing about it); *bound: the math whose
 * FLOPs set it, or FR_MATH_NONE for memory. */
double fr_ceiling_ms(const fr_node_cost *c, const fr_device_peaks *p, fr_math *bound);

typedef struct fr_profile_input {
    const fr_graph *g;
    const double *node_ms;  /* per node, summed over `runs` */
    const double *gemm_ms;  /* per node, the part spent in cuBLASLt calls (summed), or NULL */
    int runs;
    const char *device;     /* the GPU's name, for its peaks */
    const char *memory;     /* "peak at node ...", or NULL */
    int per_node;           /* also the slowest nodes one by one (FP8RUN_PROFILE=2) */
    const char *generic_attention; /* why every attention ran on fp8run's own kernels, or NULL */
} fr_profile_input;

/* The profile table (malloc'ed text): per op type (Linear by precision) its nodes, time per run
 * and share, the time inside cuBLASLt, TFLOP, GB, ceiling and % of it, what bounds it. */
FR_NODISCARD fr_status fr_profile_text(const fr_profile_input *in, char **text);

#endif
