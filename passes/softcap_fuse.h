/* Softcap fusion: Mul(Tanh(Div(x, c)), c) (Gemma 2's final-logit softcapping; either operand
 * order of the Mul, Mul(x, 1/c) for the Div when 1/c is the same float32) becomes one
 * ai.fp8run::Softcap {alpha = c} node: one pass over the [tokens, vocab] logits each way
 * instead of three. c is an untrained positive finite one-element constant, every intermediate
 * float32, read only by the next step and no graph output; y keeps its value id. Scores capped
 * inside an attention are the attention fusion's (its softcap attribute), which runs first. */
#ifndef FR_SOFTCAP_FUSE_H
#define FR_SOFTCAP_FUSE_H

#include "graph/ir.h"

/* *count receives the number of Softcap nodes made. */
FR_NODISCARD fr_status fr_fuse_softcap(fr_graph *g, int *count);

#endif
