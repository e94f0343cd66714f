/* FP8 quantization kernels of the Linear family (ops/cuda/quantize.cu, quantize_block.cu), producing the exact
 * bytes of the CPU emulation (graph/fp8_format.h, graph/fp8_scaling.c):
 *   code = cvt.rn.satfinite(x * scale)   (float32 product, one rounding, then CUDA's
 *                                        __nv_cvt_float_to_fp8 with __NV_SATFINITE)
 *   scale = ldexpf(fp8_max / amax, -margin) clamped to [FLT_MIN, FLT_MAX], amax 0 -> 1
 *   scale_inv = 1.0f / scale
 * Every kernel writes operands in the layout cuBLASLt's FP8 GEMM needs (runtime/cuda/
 * cuda_gemm.h): K-contiguous rows, dims padded with zero codes to multiples of 16 ("padded"
 * below: Rp = round_up(R, 16), Cp likewise), transposed where the GEMM contracts over the
 * source's rows, scale_inv in the cuBLASLt block layouts.
 *
 * Non-finite numbers, the GPU way of FR_ERR_NUMERIC: where the CPU kernel refuses to make a
 * scale (current/block recipe with a NaN/Inf amax, delayed recipe with a scale that is not
 * finite and > 0), the kernels here set bit `slot` of fr_q_stats.flags and make that scale_inv
 * NaN, so every GEMM output the bad tensor touches is NaN: the step's loss is non-finite and
 * the trainer skips the step, without the host reading anything mid-step. The flags word
 * stays in the node's scratch for a future step-level check (see the report of the CUDA
 * backend: a context-wide error word would let the executor name the node).
 *
 * amax (for the amax outputs and the current recipe) is a max over the float bits of |x|
 * (atomicMax on unsigned): a NaN anywhere gives NaN bits (canonicalized to 0x7FC00000 as
 * fr_amax returns), else +Inf if any Inf, else the exact maximum. Each block reduces its part
 * and makes one atomicMax; the reducing kernels take at most one wave of blocks (8 a
 * multiprocessor; fr_q_set_wave_blocks overrides, for tests) and loop over the rest, since
 * atomics on one word serialize. */
#ifndef FR_OPS_CUDA_QUANTIZE_CUH
#define FR_OPS_CUDA_QUANTIZE_CUH

#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/cuda_kernel.h"

#define FR_Q_SLOTS 2 /* fp8 operands per GEMM */

/* Per-node statistics in device scratch, zeroed (cudaMemsetAsync) before the quantization. */
typedef struct fr_q_stats {
    /* what the GEMM multiplies by (NaN when refused), at [slot][0]: cuBLASLt refuses
     * (CUBLAS_STATUS_NOT_SUPPORTED) scale pointers that are not 16-byte aligned */
    alignas(16) float scale_inv[FR_Q_SLOTS][4];
    unsigned amax_bits[FR_Q_SLOTS]; /* max float bits of |x| */
    float scale[FR_Q_SLOTS];        /* the per-tensor scale quantization multiplies by */
    unsigned flags;                 /* bit slot: a scale was refused (the CPU's FR_ERR_NUMERIC) */
} fr_q_stats;

/* Format of a quantized operand: fp8_max and which cvt. */
typedef struct fr_q_fmt {
    int e5m2;   /* 0: E4M3 (max 448), 1: E5M2 (max 57344) */
    int margin; /* scale = fp8_max / amax / 2^margin */
} fr_q_fmt;

/* A source tensor of the quantization kernels: float32, or bfloat16 (a narrowed activation or
 * gradient), widened exactly on load, so the codes, scales and amax are those of the float32
 * tensor of the same values bit for bit. The vectorized kernels load 16 bytes at a time either
 * way (4 float32 or 8 bfloat16 values). */
typedef struct fr_q_src {
    const void *p;
    int bf16; /* 1: p holds bfloat16 */
} fr_q_src;

static inline fr_q_src fr_q_f32(const float *p)
{
    fr_q_src s = {p, 0};
    return s;
}

static inline int64_t fr_q_pad16(int64_t v) { return (v + 15) / 16 * 16; }
static inline int64_t fr_q_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* stats->amax_bits[slot] = max bits of |x[0..n)| */
FR_NODISCARD fr_status fr_q_amax(cudaStream_t s, const fr_node *n, fr_q_src x, int64_t count, fr_q_stats *st, int slot);

/* Per-tensor scale of `slot`: from *given (delayed; checked finite and > 0) or from the amax
 * (current). Writes st->scale/scale_inv[slot] and, when not NULL, amax_out (the canonical amax)
 * and sinv_out (scale_inv). given == NULL && !from_amax: only amax_out is written (block
 * recipes: the amax outputs). */
FR_NODISCARD fr_status fr_q_finalize(cudaStream_t s, const fr_node *n, fr_q_stats *st, int slot, const float *given,
                        int from_amax, fr_q_fmt f, float *amax_out, float *sinv_out);

/* Per-tensor quantization of src [R][C] (row-major) with *scale into the padded dst:
 * [Rp][Cp], or its transpose [Cp][Rp] when trans. dense (optional): the codes again as
 * [R][C]; dense_t (optional, with trans = 0): the codes transposed, unpadded [C][R] (the
 * weight gradient's operands: the forward's saved Xq, the data gradient's dYq). amax_slot >= 0: also accumulates the amax
 * of src into st (the delayed recipe's single pass). Unpadded, 16-byte aligned operands with
 * a transposed layout take one read of src through 128x128 tiles (16-byte loads and stores);
 * the rest goes through 32x32 tiles. */
FR_NODISCARD fr_status fr_q_tensor(cudaStream_t s, const fr_node *n, fr_q_src src, int64_t R, int64_t C,
                      const float *scale, fr_q_fmt f, int trans, uint8_t *dst, uint8_t *dense,
                      uint8_t *dense_t, fr_q_stats *st, int amax_slot);

/* A GLU's output remade as a quantization source (ops/linear.h, x_glu): X [R][C] =
 * SwiGLU(gate_up [R][2C]) with activation act (FR_GLU_*), as the SwiGLU kernels compute it,
 * rounded to bfloat16 when y_bf16 (that SwiGLU's y_dtype); gate_up float32 or bfloat16. */
typedef struct fr_q_glu {
    const void *gate_up;
    int bf16; /* gate_up holds bfloat16 */
    int act;
    int y_bf16;
} fr_q_glu;

/* X of x quantized with *scale (NULL: 1, for an amax-only pass whose dst_t is overwritten
 * later) into the padded transpose dst_t [Cp][Rp], the weight gradient's operand; amax_slot >=
 * 0: also X's amax into st. Aligned, unpadded shapes read gate_up once through 128x128 tiles. */
FR_NODISCARD fr_status fr_q_glu_t(cudaStream_t s, const fr_node *n, fr_q_glu x, int64_t R, int64_t C,
                                  const float *scale, fr_q_fmt f, uint8_t *dst_t, fr_q_stats *st, int amax_slot);

/* Already-quantized codes [R][C] -> padded transpose [Cp][Rp] (the block recipe's saved Xq for
 * the weight gradient). */
FR_NODISCARD fr_status fr_q_transpose_codes(cudaStream_t s, const fr_node *n, const uint8_t *src, int64_t R, int64_t C,
                               uint8_t *dst);

/* Codes [R][C] -> padded copy [Rp][Cp] (zero codes in the padding). */
FR_NODISCARD fr_status fr_q_pad_codes(cudaStream_t s, const fr_node *n, const uint8_t *src, int64_t R, int64_t C, uint8_t *dst);

/* 1x128 blocks along C (the contraction dim): dst [Rp][Cp], scale_inv in cuBLASLt's VEC128
 * layout sinv[(c / 128) * Rp + r] (padding rows: codes 0, scale_inv 1). */
FR_NODISCARD fr_status fr_q_rows128(cudaStream_t s, const fr_node *n, fr_q_src src, int64_t R, int64_t C, fr_q_fmt f,
                       uint8_t *dst, float *sinv, fr_q_stats *st, int slot);

/* 128x1 blocks along R (the token dim). Any of:
 *   dst_t [Cp][Rp] with sinv_t[(r / 128) * Cp + c] (VEC128 layout of the transposed operand),
 *   dense [R][C] with sinv_dense [ceil(R/128)][C] (the saved Xq and its Xq_scale_inv). */
FR_NODISCARD fr_status fr_q_cols128(cudaStream_t s, const fr_node *n, fr_q_src src, int64_t R, int64_t C, fr_q_fmt f,
                       uint8_t *dst_t, float *sinv_t, uint8_t *dense, float *sinv_dense, fr_q_stats *st,
                       int slot);

/* 128x128 blocks of src [R][C] (block grid anchored at the storage's origin, as on the CPU):
 * dst [Rp][Cp], or [Cp][Rp] when trans; scale_inv in cuBLASLt's BLK128x128 layout of the
 * destination [O][I]: sinv[(o / 128) * L4 + i / 128], L4 = round_up(ceil(I/128), 4). */
FR_NODISCARD fr_status fr_q_tiles128(cudaStream_t s, const fr_node *n, const float *src, int64_t R, int64_t C, fr_q_fmt f,
                        int trans, uint8_t *dst, float *sinv, fr_q_stats *st, int slot);

/* Bytes of the BLK128x128 scale grid of a destination [O][I] (see fr_q_tiles128). */
static inline int64_t fr_q_blk_count(int64_t O, int64_t I)
{
    return fr_q_cdiv(O, 128) * ((fr_q_cdiv(I, 128) + 3) / 4 * 4);
}

/* dst [G][Cp] = src [G][C], padding columns 1.0f (a saved block scale grid for the GEMM). */
FR_NODISCARD fr_status fr_q_pad_grid(cudaStream_t s, const fr_node *n, const float *src, int64_t G, int64_t C, int64_t Cp,
                        float *dst);

/* dst[i] = bf16(src[i]) (round to nearest even, NaN -> 0x7FFF), as fr_f32_to_bf16. */
FR_NODISCARD fr_status fr_q_to_bf16(cudaStream_t s, const fr_node *n, const float *src, int64_t count, void *dst);

/* Y[m][c] = D[m * ldd + c] (+ bias[c]) for m < rows, c < cols; D == Y with ldd == cols adds
 * the bias in place. T = float or double (dtype FR_F32 / FR_F64). */
FR_NODISCARD fr_status fr_q_finish(cudaStream_t s, const fr_node *n, fr_dtype dt, const void *D, int64_t ldd, void *Y,
                      int64_t rows, int64_t cols, const void *bias);

/* A Linear-family GEMM g (D, d_type, bias unset) into Y [rows][cols] of y_type (float32,
 * float64, bfloat16), plus the bias: g's dims padded past rows x cols put D in `buf` (float32-
 * sized), then the copy-out. The bias has Y's type for float32 / float64 and is bfloat16 (the
 * float32 bias rounded, ops/linear.h) for a bfloat16 Y. It is added to the float32 sum before
 * Y's one rounding: by cuBLASLt's BIAS epilogue when D is Y and cuBLASLt takes it for these
 * types, else by the finishing pass (a bfloat16 Y: the GEMM writes float32 into buf first, so
 * buf must hold g->M x g->N floats when Y is bfloat16 with a bias). */
FR_NODISCARD fr_status fr_q_gemm_out(fr_cuda_ctx *cu, const fr_node *n, const fr_gemm *g, fr_dtype y_type, void *Y,
                                     int64_t rows, int64_t cols, const void *bias, void *buf);

/* Y[m][c] = bf16(D[m * ldd + c] + bias[c]) (bias optional: bfloat16 [cols], widened) for
 * m < rows, c < cols: a float32 GEMM result (padded, or the fallback of a bias epilogue
 * cuBLASLt refused) rounded once to nearest even into a bfloat16 Y (NaN -> 0x7FFF, as
 * fr_f32_to_bf16). */
FR_NODISCARD fr_status fr_q_finish_bf16(cudaStream_t s, const fr_node *n, const float *D, int64_t ldd, void *Y,
                                        int64_t rows, int64_t cols, const void *bias);

#endif
