/* LoRA (Hu et al., 2021) as PEFT builds it: every Linear whose weight name matches the targets
 * regex gets a low-rank update
 *     y = x W^T  +  s * (x A^T) B^T,     s = alpha / r,
 * A [r, in] (kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), as PEFT
 * initializes it), B [out, r] zeros, so the model starts exactly at the base model. The
 * adapters are named as PEFT saves them, base_model.model.<module>.lora_A.weight / lora_B.weight
 * (<module>: the weight's name without ".weight"); every other parameter of the graph becomes a
 * constant (LoRA trains the adapters only). With dropout p > 0 each adapter reads
 * KeyedDropout(x) (passes/dropout.h) instead of x, as PEFT's lora_dropout: its own mask per
 * adapter, step and micro-batch, kept elements scaled by 1 / (1 - p); evaluation and exports
 * have no dropout.
 *
 * Runs on the imported training graph after the trained parameters are chosen: the weight is
 * the MatMul's right operand (stored [in, out], or Transpose(W) of W [out, in] as graph/params.c
 * restores it) or Gemm's B (transA 0, alpha 1). The FP8 compiler later turns both adapter
 * MatMuls into Linears of their own. */
#ifndef FR_LORA_H
#define FR_LORA_H

#include "graph/ir.h"
#include "graph/rng.h"

typedef struct fr_lora_options {
    int rank;            /* r >= 1; 0: no LoRA */
    double alpha;        /* s = alpha / r */
    const char *targets; /* POSIX extended regex over weight names (searched, as --train) */
    double dropout;      /* p in [0, 1): dropout on each adapter's input (0: none) */
} fr_lora_options;

/* One adapted Linear. */
typedef struct fr_lora_adapter {
    char *module;        /* "model.layers.0.self_attn.q_proj" */
    char *weight;        /* the base weight's value name */
    char *a, *b;         /* the adapters' value names */
    int64_t in, out;
    int w_in_out;        /* 1: the base weight is stored [in, out] (MatMul's operand itself) */
} fr_lora_adapter;

typedef struct fr_lora_result {
    fr_lora_adapter *ad;
    int n;
    double scale;          /* alpha / r */
    int64_t frozen_params; /* elements of the parameters made constants */
    int64_t frozen_bytes;  /* their bytes as the graph stores them */
} fr_lora_result;

/* Apply o to g (rng draws A's initial values). No Linear matching the targets is
 * FR_ERR_INVALID_ARG naming the regex; a matched weight read by two MatMuls is refused. */
FR_NODISCARD fr_status fr_lora_apply(fr_graph *g, const fr_lora_options *o, fr_prng *rng, fr_lora_result *out);
void fr_lora_result_free(fr_lora_result *r);
/* The adapter whose A or B value is called `name`, or NULL. */
const fr_lora_adapter *fr_lora_find(const fr_lora_result *r, const char *name);

#endif
