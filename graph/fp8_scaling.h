/* FP8 scaling: how the scale of a quantized operand (q = sat(round(x * scale)), x ~ q * scale_inv)
 * is chosen by each recipe.
 *
 *  - delayed (fr_fp8_scaling): one state per FP8 operand (a layer's input, weight or output
 *    gradient). The step quantizes with the scale known before it and reports the amax of the
 *    unquantized tensor; fr_fp8_scaling_update() then records that amax in a ring buffer of the
 *    last `history_len` amaxes and, on every `interval`-th update, recomputes
 *        scale = fp8_max / amax_hist / 2^margin
 *    where amax_hist is the maximum over the history ("max") or the amax just recorded
 *    ("most_recent"). Updates are counted from 0 and the scale is recomputed on updates
 *    0, K, 2K, ... (so the first step's amax sets a scale at once). An amax_hist of 0 keeps
 *    the old scale. A NaN/Inf amax never becomes a scale: the update returns FR_ERR_NUMERIC
 *    and leaves the state exactly as it was (the trainer skips that step).
 *    This is Transformer Engine's DelayedScaling model (amax_history_len, amax_compute_algo,
 *    margin, interval).
 *  - current: the scale of a tensor comes from that tensor's own amax (fr_fp8_scale_from_amax).
 *  - block: one scale per block (1x128 of activations/gradients along the GEMM's contraction
 *    dim, 128x128 of weights), each from its block's amax (fr_fp8_quantize_blocks).
 *
 * Every scale is computed in float32 as (fp8_max / amax) * 2^-margin; a result that overflows
 * float32 (tiny amax) becomes FLT_MAX, so a scale is always finite and > 0. scale_inv is the
 * float32 quotient 1 / scale, which is what dequantization multiplies by. */
#ifndef FR_FP8_SCALING_H
#define FR_FP8_SCALING_H

#include <stdint.h>

#include "graph/tensor.h"
#include "graph/status.h"

/* ---- scale from an amax (current recipe, blocks, and the delayed update) ---- */

/* *scale = fp8_max(fmt) / amax * 2^-margin, clamped to FLT_MAX; amax == 0 gives `if_zero`.
 * A NaN, infinite or negative amax is FR_ERR_NUMERIC (message names `what`), *scale untouched.
 * fmt must be FR_F8E4M3 or FR_F8E5M2; |margin| <= 64. */
FR_NODISCARD fr_status fr_fp8_scale_from_amax(float amax, fr_dtype fmt, int margin, float if_zero,
                                 const char *what, float *scale);

/* ---- quantization by blocks (all three recipes) ----
 * Quantizes a row-major matrix src[R][C] (row stride ld_src) whose blocks are br x bc elements
 * (the last block in each direction may be smaller). The scale grid has ceil(R/br) x
 * ceil(C/bc) entries, row-major.
 *   given_scale != NULL: every block uses *given_scale (per-tensor delayed scaling, with
 *                        br = R and bc = C; it must be finite and > 0).
 *   given_scale == NULL: each block's scale is fr_fp8_scale_from_amax(block amax, fmt, margin,
 *                        1.0f) (current scaling when the block is the whole matrix); a
 *                        non-finite block amax is FR_ERR_NUMERIC naming `what` and the block.
 * Outputs (each may be NULL):
 *   q[R*C]           the fp8 codes, row-major, dense (row stride C);
 *   scale_inv[grid]  1 / scale of each block;
 *   deq[R][ld_deq]   the dequantized values decode(q) * scale_inv (float32 product), i.e. what
 *                    an FP8 GEMM multiplies.
 * br, bc >= 1; R or C may be 0. */
FR_NODISCARD fr_status fr_fp8_quantize_blocks(const float *src, int64_t R, int64_t C, int64_t ld_src,
                                 int64_t br, int64_t bc, fr_dtype fmt, int margin,
                                 const float *given_scale, const char *what, uint8_t *q,
                                 float *scale_inv, float *deq, int64_t ld_deq);

/* ---- delayed scaling state ---- */

typedef enum fr_amax_algo {
    FR_AMAX_MAX = 0,         /* maximum over the history window */
    FR_AMAX_MOST_RECENT = 1  /* the amax recorded last */
} fr_amax_algo;

typedef struct fr_fp8_scaling_params {
    int history_len;    /* N >= 1: amaxes remembered */
    fr_amax_algo algo;
    int margin;         /* M: scale = fp8_max / amax / 2^M; |M| <= 64 */
    int interval;       /* K >= 1: recompute the scale on every K-th update */
    fr_dtype fmt;       /* FR_F8E4M3 or FR_F8E5M2: gives fp8_max */
} fr_fp8_scaling_params;

typedef struct fr_fp8_scaling {
    fr_fp8_scaling_params p;
    float *history;     /* ring buffer of p.history_len amaxes, 0 where nothing was recorded */
    int pos;            /* slot the next amax goes to */
    int64_t updates;    /* amaxes recorded so far */
    float scale;        /* scale the next step quantizes with (1 before any recompute) */
    float scale_inv;    /* 1 / scale */
} fr_fp8_scaling;

/* TE's defaults: history 1024, max, margin 0, interval 1, E4M3. */
void fr_fp8_scaling_params_default(fr_fp8_scaling_params *p);
/* Parse "max" / "most_recent"; anything else is FR_ERR_INVALID_ARG. */
FR_NODISCARD fr_status fr_amax_algo_parse(const char *s, fr_amax_algo *out);
const char *fr_amax_algo_name(fr_amax_algo a);

/* Validate params and set up a state with scale 1 and an empty (zero) history. */
FR_NODISCARD fr_status fr_fp8_scaling_init(fr_fp8_scaling *s, const fr_fp8_scaling_params *p);
void fr_fp8_scaling_free(fr_fp8_scaling *s);
/* Record this step's amax and, on every interval-th update, recompute scale/scale_inv (see the
 * top of this file). NaN/Inf/negative amax: FR_ERR_NUMERIC naming `what`, state unchanged. */
FR_NODISCARD fr_status fr_fp8_scaling_update(fr_fp8_scaling *s, float amax, const char *what);
/* The amax the next recompute would use now (max over history or the most recent one). */
float fr_fp8_scaling_amax(const fr_fp8_scaling *s);

#endif
