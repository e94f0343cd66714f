/* A Llama-style decoder written as an ONNX graph with random weights (what `fp8run generate
 * llama` and fp8run_model_generate_llama produce), for benchmarks and tests at sizes no
 * fixture has.
 *
 * The graph is what a PyTorch export of a Llama looks like, written directly: token embedding
 * (Gather), per layer RMSNormalization, Q/K/V MatMuls with weights stored [in, out], rotary
 * embeddings (rotate_half: Slice/Neg/Concat, cos/sin tables as Constant nodes sliced to the
 * sequence), grouped-query attention by broadcasting MatMuls ([B, KV, G, T, hd] x
 * [B, KV, 1, hd, T]), a causal additive mask (Trilu of a -inf ConstantOfShape), Softmax,
 * output projection, residuals, a SwiGLU MLP (x*Sigmoid(x) gate), final RMSNormalization and an
 * untied LM head. Input `input_ids` int64 [batch, seq], output `logits` float [batch, seq,
 * vocab]; opset 23 (RMSNormalization). Constants that are not weights (rotary tables, scales,
 * shapes) are Constant nodes, so they are not trained. Weights: N(0, 0.02), output
 * projections N(0, 0.02 / sqrt(2 * layers)), norm gains 1; deterministic from the seed. */
#ifndef FR_LLAMA_GEN_H
#define FR_LLAMA_GEN_H

#include <stdint.h>

#include "graph/ir.h"

typedef struct fr_llama_config {
    int64_t d, layers, heads, kv_heads, ffn, vocab, max_seq;
    uint64_t seed;
} fr_llama_config;

/* Bounds on a generated model, checked before anything is allocated. */
#define FR_LLAMA_MAX_LAYERS 4096
#define FR_LLAMA_MAX_PARAMS 1e12

/* Check the sizes: FR_ERR_INVALID_ARG naming the first inconsistent one (all >= 1, d split
 * into `heads` heads of even size, heads into kv_heads groups, at most FR_LLAMA_MAX_LAYERS
 * layers and FR_LLAMA_MAX_PARAMS parameters). */
FR_NODISCARD fr_status fr_llama_check(const fr_llama_config *c);
/* Build the graph (checked first). */
FR_NODISCARD fr_status fr_llama_generate(const fr_llama_config *c, fr_graph **out);

#endif
