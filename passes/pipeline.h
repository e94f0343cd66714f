/* The training pipeline: the ordered list of graph passes that turn an imported model into the
 * forward graph the trainer differentiates (and `fp8run compile` writes, `fp8run info`
 * reports). The list in pipeline.c is the one statement of their order; the runtime
 * (runtime/train/train_build.c) runs it stage by stage and does its own steps between the stages
 * (making the training copy, marking the outputs it needs, checking the loss).
 *
 * Adding a pass: its own code, plus one entry in the list at the place its comment justifies.
 * A pass reads what it needs from fr_pass_ctx (never the trainer), and says what it did in its
 * fr_pass_result ("pass fuse_attention: 2 fused").
 *
 * Options: an entry names the option that turns it on (a name of fr_train_options, e.g.
 * "fuse_attention"; NULL: always runs). passes/ does not know the options struct: the runtime
 * resolves the name through fr_pass_ctx.option, so the coupling is that one function. */
#ifndef FR_PIPELINE_H
#define FR_PIPELINE_H

#include "graph/ir.h"
#include "passes/fp8_compile.h"
#include "passes/lora.h"
#include "passes/passes.h"
#include "passes/retie.h"

/* What state of the graph a pass reads, i.e. where in the build it runs. The list holds the
 * stages in this order, each one contiguous. */
typedef enum fr_pass_stage {
    /* the copy of the model that export and checkpoints see, before the training copy is
       made from it (names and layouts stay the model's) */
    FR_STAGE_MODEL,
    /* the training copy as imported (symbolic shapes, nothing folded), the outputs the
       trainer needs marked; from choosing the trained parameters to `prepare` */
    FR_STAGE_IMPORTED,
    /* the prepared graph (static shapes, constants folded), the loss checked */
    FR_STAGE_PREPARED,
    /* the training graph once autodiff appended the backward (its gradients and amaxes marked
       as outputs), before dead-node elimination and the executor's plan */
    FR_STAGE_DIFFERENTIATED,
    FR_STAGE_COUNT
} fr_pass_stage;

/* What a pass did, one per entry the runtime reached (off ones included). */
typedef struct fr_pass_result {
    const char *name;   /* the entry's name (static) */
    int ran;            /* 0: turned off by its option */
    int changed;        /* nodes (or values) it fused, removed, rewrote: its headline count */
    char detail[512];   /* the rest, as text: "2 fused", "off (fuse_attention = 0)" */
} fr_pass_result;

#define FR_PIPELINE_MAX_PASSES 32

typedef struct fr_pipeline_report {
    fr_pass_result pass[FR_PIPELINE_MAX_PASSES];
    int n;
} fr_pipeline_report;

/* Resolve option `name` of the runtime's options `opts` to on (1) or off (0); an unknown name
 * is an error (FR_ERR_INTERNAL naming it). */
typedef fr_status (*fr_pass_option_fn)(const void *opts, const char *name, int *on);

/* Everything a pass may read or fill; the runtime sets the fields of the stages it runs. */
typedef struct fr_pass_ctx {
    fr_graph *g;                  /* the graph the stage rewrites */
    const void *opts;             /* the runtime's options, read through `option` only */
    fr_pass_option_fn option;     /* may be NULL when every entry run has no option */
    /* select_params: the --train / --freeze regexes (NULL: none) */
    const char *train_regex;
    const char *freeze_regex;
    /* prepare: symbolic dims and the shapes the trainer feeds (not owned) */
    const fr_dim_binding *dims;
    int n_dims;
    const fr_input_shape *input_shapes;
    int n_input_shapes;
    /* fp8_compile: its options (precision set) and where its report goes (caller-owned,
       zeroed; *compiled = 1 once it is filled) */
    fr_fp8_options fp8;
    fr_fp8_report *report;
    int *compiled;
    /* outputs of the parameter passes (caller-owned) */
    fr_tie **ties;                /* retie: the re-tied copies (malloc'ed) */
    int *n_ties;
    int *n_unshared;              /* unshare */
    /* the differentiated stage: nodes [0, n_forward) are the forward; the --recompute mode
       ("none" | "attention" | "mlp" | "full") */
    int n_forward;
    const char *recompute;
    /* lora: its options, the generator A is drawn from, and what it did (caller-owned) */
    const fr_lora_options *lora;
    fr_prng *rng;
    fr_lora_result *lora_out;
    /* the per-pass results, appended in list order (may be NULL) */
    fr_pipeline_report *results;
} fr_pass_ctx;

typedef fr_status (*fr_pass_fn)(fr_pass_ctx *ctx, fr_pass_result *res);

/* One entry of the pipeline. */
typedef struct fr_pass {
    const char *name;   /* "fuse_attention" */
    const char *what;   /* one line: what it does */
    fr_pass_stage stage;
    const char *option; /* the option that enables it, NULL: always */
    int reload;         /* 1: loading a compiled graph file runs it again (the file keeps the
                           rewritten graph, not what this pass derives from it) */
    fr_pass_fn run;
} fr_pass;

/* The list, in order; *n gets its length. */
const fr_pass *fr_pipeline_passes(int *n);
/* The entry named `name`, or NULL. */
const fr_pass *fr_pipeline_find(const char *name);
/* Run the entries of `stage` in order (each one whose option is on), appending a result per
 * entry to ctx->results. Stops at the first failure (the pass's own error). */
FR_NODISCARD fr_status fr_pipeline_run(fr_pass_ctx *ctx, fr_pass_stage stage);
/* Run the entries marked `reload` on g (a graph read from a compiled file): the steps the file
 * does not record. Their options are not consulted (they have none). */
FR_NODISCARD fr_status fr_pipeline_reload(fr_graph *g);
/* "pass NAME: DETAIL" into buf (always terminated); returns buf. */
char *fr_pass_result_line(const fr_pass_result *r, char *buf, size_t n);

#endif
