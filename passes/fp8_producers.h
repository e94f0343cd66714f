/* FP8-emitting producers, on the differentiated graph: an op that makes an fp8 Linear's X
 * writes X's E4M3 codes itself, so X is never written in bfloat16 and the Linear quantizes
 * nothing.
 *
 * Today's producer is the one-input SwiGLU feeding the MLP's down projection: it becomes
 * SwiGLUQuantize (ops/swiglu.h), which reads the Linear's scale_x (the delayed recipe's state)
 * and writes the codes and the amax the Linear wrote (its amax_x output moves to the producer;
 * the delayed recipe's history reads the same value). The Linear reads the codes (ops/linear.h,
 * an E4M3 X) and multiplies them with 1 / scale_x: Y is the same bit for bit.
 *
 * Only where nothing else reads X: the Linear saves no Xq (its weight gradient remakes X from
 * the gate/up output, FP8RUN_WGRAD_OPERAND=remade with x_glu), no LoRA adapter or other node reads
 * X, and X is no graph output. Per-tensor delayed recipe only (the current recipe would need X's
 * amax before the codes: two passes over gate/up). At 1B, B8 x T2048 it saves a layer's
 * bfloat16 X written and read (176 MiB each way) and the Linear's quantization pass. */
#ifndef FR_FP8_PRODUCERS_H
#define FR_FP8_PRODUCERS_H

#include "graph/ir.h"

/* Rewrite g (forward and backward, in executable order); *changed: the producers rewritten. */
FR_NODISCARD fr_status fr_fp8_producers(fr_graph *g, int *changed);

#endif
