/* SwiGLU fusion: the Llama MLP activation Mul(Mul(g, Sigmoid(g)), u) becomes one
 * ai.fp8run::SwiGLU node (ops/swiglu.h), which keeps no intermediate for the backward.
 *
 * Runs after the FP8 compiler (which fuses the gate and up Linears into one Linear followed by
 * a Split), or on the prepared fp32 graph. Recognized, float32, g, u and the product of one
 * shape (no broadcasting):
 *     Mul(Mul(g, Sigmoid(g)), u)     either operand order of either Mul
 *     Mul(g, Mul(Sigmoid(g), u))     either operand order of either Mul
 * where Sigmoid's output and the inner Mul's output are read only by the next step and are not
 * graph outputs. The product keeps its value, so the rest of the graph is unchanged.
 * Then, when g and u are the two outputs of one Split along the last axis into equal halves
 * (g first) and nothing else reads them, the SwiGLU reads the Split's input instead (the
 * one-input form) and the Split is removed.
 * GeGLU too: Mul(Gelu(g), u), either order, the Gelu of either domain (passes/gelu_fuse.c's),
 * becomes SwiGLU with activation "gelu_tanh" (approximate="tanh") or "gelu". */
#ifndef FR_SWIGLU_FUSE_H
#define FR_SWIGLU_FUSE_H

#include "graph/ir.h"

/* *count receives the number of SwiGLU nodes made; *one_input (may be NULL) how many of them
 * read a Split's input directly. */
FR_NODISCARD fr_status fr_fuse_swiglu(fr_graph *g, int *count, int *one_input);

#endif
