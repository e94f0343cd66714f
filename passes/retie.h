/* Re-tying weights that an exporter untied.
 *
 * A model that ties its LM head to its token embedding (GPT-2, OPT, BERT's MLM decoder) reads
 * one Parameter twice: Gather(E, ids) and logits = h @ E^T. torch.onnx.export with constant
 * folding (the default) folds the E^T into an initializer of its own ("onnx::MatMul_293"), so
 * the ONNX file holds two copies, and training them separately would untie what the model tied:
 * from the second step on, losses part from PyTorch's.
 *
 * fr_retie_params finds every trainable 2-D float32 initializer C that equals, bit for bit, the
 * transpose of (or a copy of) another trainable initializer S that a Gather reads as its table
 * (the embedding), and makes C's readers read S again: through one new Transpose(S) node when
 * C is the transpose, directly when it is a copy. C stops being a parameter (it stays an
 * initializer, unreferenced, so export can write the trained S back into it). Tensors whose
 * elements are all equal (zeros, ones: fresh biases and LoRA factors) are never tied. */
#ifndef FR_RETIE_H
#define FR_RETIE_H

#include "graph/ir.h"

typedef struct fr_tie {
    int copy;       /* value id of the initializer that was a copy (no longer FR_VAL_PARAM) */
    int source;     /* value id of the parameter it copies */
    int transposed; /* 1: copy == source^T; 0: copy == source */
} fr_tie;

/* Rewrites g (topologically sorted; shapes of initializers known). *ties (malloc'ed, may be
 * NULL when none) receives the ties made; *n_ties their count. */
FR_NODISCARD fr_status fr_retie_params(fr_graph *g, fr_tie **ties, int *n_ties);

/* Write the source's values into every copy (transposed where needed), in graph `to`, where
 * both are looked up by their names in `from` (the graph the ties were made in): before export,
 * so the original initializers of the pristine model carry the trained weights. */
void fr_retie_sync(const fr_graph *from, const fr_tie *ties, int n_ties, fr_graph *to);

#endif
