/* Packed sequences (seg_form packed) as cuDNN's variable-length sequences: which tokens of the
 * [windows, T] packed batch form each sequence (attention_cudnn_ragged.c: the host reference
 * the device kernel of attention_cudnn_node.cu follows, and the bound on sequences per call).
 *
 * A sequence is a maximal run of equal segment ids within one window: each example is one, and
 * so is the padding after the last example (id 0), which then attends to itself causally as the
 * op's contract says (its outputs and gradients match fp8run's kernels and the CPU reference).
 * Sequences are numbered over the whole batch in token order; a cuDNN plan is built for a fixed
 * number of slots (fr_cudnn_ragged_slots), the unused ones of length 0 placed at the end. */
#ifndef FR_ATTENTION_CUDNN_RAGGED_H
#define FR_ATTENTION_CUDNN_RAGGED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sequences a window may hold on cuDNN's path (fewer when T is shorter): a batch of `windows`
 * windows plans windows x this many slots. Why a bound: a plan is built per problem and cuDNN's
 * kernels launch work for every slot (an empty one costs a few thread blocks that exit at
 * once), so the slots are fixed per node, not per step; 64 examples a window is an average of 32
 * tokens per example at T = 2048. fp8run's own SFT packing puts at most 63 examples in a window
 * (runtime/io/sft_data.h, FR_SFT_MAX_EXAMPLES), so with the padding run its windows always fit.
 * Segment ids from elsewhere that hold more sequences in all fail the step on the device error
 * word, naming the node (the count and the bound), never silently. */
#define FR_CUDNN_RAGGED_PER_WINDOW 64

/* The slots of a batch of `windows` windows of T tokens, per_window a window (the context's
 * fr_cuda_ctx.ragged_per_window: the most sequences the data puts in one; 0 or less:
 * FR_CUDNN_RAGGED_PER_WINDOW), never more than T a window. On an H200 the empty slots of the
 * default made the 1B's packed backward 2.3x the plain causal one: size them to the data. */
int64_t fr_cudnn_ragged_slots(int64_t windows, int64_t T, int64_t per_window);

/* The sequences of segment ids `sk` (int32, or int64 when sk64; [rows, T], window r reading row
 * r * hq / per_row: per_row Q batch indices per row, hq query heads per window): for sequence
 * k < slots, start[k] its first token (r * T + j) and len[k] its length; slots past the last
 * sequence get start windows * T and length 0. Returns the number of sequences, which may
 * exceed slots (then only the first slots are written). */
int64_t fr_cudnn_ragged_reference(const void *sk, int sk64, int64_t windows, int64_t T, int64_t hq, int64_t per_row,
                                  int64_t slots, int32_t *start, int32_t *len);

#ifdef __cplusplus
}
#endif

#endif
