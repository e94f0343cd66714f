/* GELU fusion: GELU written out by an exporter becomes one Gelu node (ops/unary.c: computed in
 * double and rounded once; its backward one ActivationGrad), in the ai.fp8run domain (ONNX's
 * own Gelu needs opset 20), approximate="none" or "tanh" as the chain says.
 *
 * Recognized, x and y float32 of one shape, with h = 0.5 x (1 + t) written as
 * Mul(x, Mul(0.5, Add(t, 1))), Mul(Mul(x, 0.5), Add(t, 1)) or Mul(Mul(x, Add(t, 1)), 0.5):
 *     erf   t = Erf(Div(x, sqrt 2)) | Erf(Mul(x, 1 / sqrt 2))          BERT's gelu
 *     tanh  t = Tanh(Mul(sqrt(2 / pi), Add(x, Mul(0.044715, Pow(x, 3)))))
 *                                                  gelu_new, gelu_pytorch_tanh (GPT-2, Gemma)
 * either operand order of every Mul and Add; constants untrained one-element values within
 * 1e-6 relative of the exact ones; every intermediate read only by the next step and no graph
 * output. y keeps its value id. GeGLU (Mul(gelu(gate), up)) becomes Gelu and that Mul. */
#ifndef FR_GELU_FUSE_H
#define FR_GELU_FUSE_H

#include "graph/ir.h"

/* *count receives the number of Gelu nodes made. */
FR_NODISCARD fr_status fr_fuse_gelu(fr_graph *g, int *count);

#endif
