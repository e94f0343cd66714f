/* `fp8run info MODEL [--dim NAME=VALUE ...]`: what is in a model, and, once every input dim is
 * known, what the prepared graph looks like. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "graph/onnx_io.h"
#include "runtime/fbs.h"
#include "runtime/trainer.h"

void cli_info_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run info MODEL|COMPILED.fbs [--dim NAME=VALUE ...] [recipe options]\n"
            "\n"
            "Describe an ONNX model: producer, IR version, opsets, graph inputs and outputs with\n"
            "their dtypes and shapes (symbolic dims by name), the parameter count (elements of\n"
            "trainable float initializers), initializer bytes and a histogram of op types.\n"
            "\n"
            "When every graph input dim is known (fixed in the model or given with --dim), the\n"
            "model is also prepared as `fp8run run` would (Identity removal, shape inference,\n"
            "constant folding, dead-node elimination) and the prepared graph is summarized.\n"
            "\n"
            "'Linear layers' lists what the FP8 compiler does with each Linear (MatMul/Gemm with a\n"
            "trainable weight): precision and why (boundary, excluded, fused with ...), K x N and\n"
            "the padding the GPU adds, the recipe, and the MatMul/Gemm left alone with the reason.\n"
            "For an ONNX model these are the decisions `fp8run train --precision fp8` (or\n"
            "`fp8run compile`) would take with the options given here (decisions do not depend on\n"
            "--batch/--seq); for a compiled graph (.fbs) the recorded decisions, the batch x seq it\n"
            "is specialized to and its FP8 scaling state.\n"
            "\n"
            "options:\n"
            "  --dim NAME=VALUE        fix the symbolic dimension NAME (repeatable)\n"
            "  --batch B --seq T       the shape the Linear analysis prepares for (default 1 x 16)\n"
            "  --tokens-input NAME --logits-output NAME --loss-output NAME --train RE --freeze RE\n"
            CLI_RECIPE_HELP
            "  -h, --help              show this help\n");
}

typedef struct op_count {
    char *name;
    int count;
} op_count;

static int by_count(const void *a, const void *b)
{
    const op_count *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return strcmp(x->name, y->name);
}

/* Op histogram of the live nodes, most frequent first. */
static int print_histogram(const fr_graph *g, const char *indent)
{
    op_count *h = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *h);
    int n = 0, rc = 0;
    if (!h) return cli_fail("out of memory");
    for (int i = 0; i < g->n_nodes && rc == 0; i++) {
        const fr_node *nd = &g->nodes[i];
        char name[256];
        if (nd->dead) continue;
        if (nd->domain[0])
            snprintf(name, sizeof name, "%s::%s", nd->domain, nd->op_type);
        else
            snprintf(name, sizeof name, "%s", nd->op_type);
        int k = 0;
        while (k < n && strcmp(h[k].name, name) != 0) k++;
        if (k == n) {
            h[n].name = strdup(name);
            if (!h[n].name) rc = cli_fail("out of memory");
            n++;
        }
        h[k].count++;
    }
    if (rc == 0) {
        qsort(h, (size_t)n, sizeof *h, by_count);
        for (int k = 0; k < n; k++) printf("%s%-28s %d\n", indent, h[k].name, h[k].count);
    }
    for (int k = 0; k < n; k++) free(h[k].name);
    free(h);
    return rc;
}

static void print_values(const fr_graph *g, const int *ids, int n, const char *indent)
{
    for (int i = 0; i < n; i++) {
        const fr_value *v = &g->values[ids[i]];
        char shp[512];
        printf("%s%-28s %-9s %s\n", indent, v->name, fr_dtype_name(v->dtype),
               fr_value_shape_text(v, shp, sizeof shp));
    }
}

static void print_model(const fr_graph *g, const char *path)
{
    char a[64], b[64];
    printf("model          %s\n", path);
    printf("producer       %s%s%s\n", g->producer_name && g->producer_name[0] ? g->producer_name : "(none)",
           g->producer_version && g->producer_version[0] ? " " : "",
           g->producer_version ? g->producer_version : "");
    printf("ir_version     %lld\n", (long long)g->ir_version);
    printf("opsets        ");
    for (int i = 0; i < g->n_opsets; i++)
        printf("%s %s %lld", i ? "," : "", g->opsets[i].domain[0] ? g->opsets[i].domain : "ai.onnx",
               (long long)g->opsets[i].version);
    printf("%s\n", g->n_opsets ? "" : " (none)");
    if (g->name && g->name[0]) printf("graph          %s\n", g->name);
    printf("inputs         %d\n", g->n_inputs);
    print_values(g, g->inputs, g->n_inputs, "  ");
    printf("outputs        %d\n", g->n_outputs);
    print_values(g, g->outputs, g->n_outputs, "  ");

    int64_t params = fr_graph_param_count(g);
    int n_param_tensors = 0;
    uint64_t init_bytes = 0;
    for (int i = 0; i < g->n_initializers; i++) {
        const fr_value *v = &g->values[g->initializers[i]];
        if (v->constant) init_bytes += v->constant->nbytes;
        if ((v->flags & FR_VAL_PARAM) && v->constant) n_param_tensors++;
    }
    printf("parameters     %s (%lld elements in %d tensor%s)\n", cli_human_count(params, a, sizeof a),
           (long long)params, n_param_tensors, n_param_tensors == 1 ? "" : "s");
    printf("initializers   %s (%llu bytes in %d tensor%s)\n", cli_human_bytes(init_bytes, b, sizeof b),
           (unsigned long long)init_bytes, g->n_initializers, g->n_initializers == 1 ? "" : "s");
    printf("nodes          %d\n", g->n_nodes);
    printf("op histogram\n");
}

/* Symbolic input dims still without a value, as "batch, seq"; empty when none. */
static void open_dims(const fr_graph *g, char *buf, size_t n)
{
    const char *seen[64];
    int n_seen = 0;
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < g->n_inputs; i++) {
        const fr_value *v = &g->values[g->inputs[i]];
        if (v->rank < 0 && off < n)
            off += (size_t)snprintf(buf + off, n - off, "%s(shape of '%s')", off ? ", " : "", v->name);
        for (int d = 0; d < v->rank; d++) {
            const char *p = v->dim_params[d];
            if (v->dims[d] >= 0) continue;
            if (!p) p = "(unnamed)";
            int dup = 0;
            for (int k = 0; k < n_seen && !dup; k++) dup = strcmp(seen[k], p) == 0;
            if (dup) continue;
            if (n_seen < 64) seen[n_seen++] = p;
            if (off < n) off += (size_t)snprintf(buf + off, n - off, "%s%s", off ? ", " : "", p);
        }
    }
}

/* The FP8 compile decisions for an ONNX model, with the info command's options. */
static int print_linears_onnx(const fr_graph *g, fr_train_options *o, int64_t batch, int64_t seq)
{
    printf("Linear layers (FP8 compile with these options; `fp8run compile` would record them)\n");
    if (strcmp(o->precision, "fp32") == 0) {
        printf("  precision fp32: no Linear is rewritten\n");
        return 0;
    }
    /* without --batch/--seq, a --dim that names the tokens input's dims gives them */
    for (int i = 0; i < g->n_inputs; i++) {
        const fr_value *v = &g->values[g->inputs[i]];
        if ((v->dtype != FR_I64 && v->dtype != FR_I32) || v->rank != 2) continue;
        for (int k = 0; k < o->n_dims; k++) {
            if (!batch && v->dim_params[0] && strcmp(o->dims[k].name, v->dim_params[0]) == 0) batch = o->dims[k].value;
            if (!seq && v->dim_params[1] && strcmp(o->dims[k].name, v->dim_params[1]) == 0) seq = o->dims[k].value;
        }
        break;
    }
    o->batch = batch ? batch : 1;
    o->seq_len = seq ? seq : 16;
    fr_graph *cg = NULL;
    fr_fp8_report rep;
    if (fr_train_compile_graph(g, o, &cg, &rep) != FR_OK) {
        /* not a model the trainer can take as it is: say why, the rest of info stands */
        printf("  not available: %s\n", fr_last_error());
        return 0;
    }
    char *text = NULL;
    int rc = fr_fp8_report_format(&rep, &text) == FR_OK ? 0 : cli_fail_status();
    if (rc == 0) {
        fputs(text, stdout);
        if (rep.n_layers == 0) printf("  (no MatMul/Gemm with a trainable 2-D weight)\n");
    }
    free(text);
    fr_fp8_report_free(&rep);
    fr_graph_free(cg);
    return rc;
}

static const char *operand_name(fr_fp8_operand o) { return o == FR_FP8_OPERAND_X ? "x" : o == FR_FP8_OPERAND_W ? "w" : "dy"; }

/* A compiled graph: what it is specialized to, the recorded decisions and the scaling state. */
static int print_compiled(const fr_fbs *f)
{
    const fr_fbs_spec *s = &f->spec;
    printf("compiled graph (fp8run format %d)\n", FR_FBS_FORMAT);
    printf("  specialized to batch %lld x seq %lld (tokens input '%s'); recompile for another shape\n",
           (long long)s->batch, (long long)s->seq, s->tokens_input);
    for (int i = 0; i < s->n_dims; i++) printf("  --dim %s=%lld\n", s->dims[i].name, (long long)s->dims[i].value);
    if (s->train_regex || s->freeze_regex)
        printf("  trained: --train %s --freeze %s\n", s->train_regex ? s->train_regex : "(all)",
               s->freeze_regex ? s->freeze_regex : "(none)");
    printf("  original model: %d nodes, %d initializers (export and checkpoints use its names)\n",
           f->original->n_nodes, f->original->n_initializers);
    for (int i = 0; i < s->n_ties; i++)
        printf("  re-tied: '%s' follows '%s'%s\n", f->graph->values[s->ties[i].copy].name,
               f->graph->values[s->ties[i].source].name, s->ties[i].transposed ? " (transposed)" : "");
    printf("Linear layers (recorded)\n");
    char *text = NULL;
    if (fr_fp8_report_format(&f->report, &text) != FR_OK) return cli_fail_status();
    fputs(text, stdout);
    free(text);
    if (f->n_states) {
        int fresh = 1;
        for (int i = 0; i < f->n_states; i++) fresh = fresh && f->states[i].updates == 0;
        printf("FP8 scaling state (%d operands%s)\n", f->n_states, fresh ? ", fresh: scale 1, empty history" : "");
        if (!fresh) {
            printf("  %-48s %-3s %-5s %12s %12s %8s\n", "layer", "op", "fmt", "scale", "amax (hist)", "updates");
            for (int i = 0; i < f->n_states; i++) {
                const fr_fp8_state *st = &f->report.states[i];
                printf("  %-48s %-3s %-5s %12.6g %12.6g %8lld\n", f->report.layers[st->layer].name,
                       operand_name(st->operand), st->fmt == FR_F8E5M2 ? "e5m2" : "e4m3", (double)f->states[i].scale,
                       (double)fr_fp8_scaling_amax(&f->states[i]), (long long)f->states[i].updates);
            }
        }
    }
    return 0;
}

/* FR_VAL_PARAM as the compiled graph records it (the file's float initializers include folded
 * constants and the scaling state), so the parameter count is right. */
static void params_from(fr_graph *g, const fr_graph *decoded)
{
    for (int i = 0; i < g->n_values; i++) {
        int d = fr_graph_find_value(decoded, g->values[i].name);
        if (d >= 0 && (decoded->values[d].flags & FR_VAL_PARAM))
            g->values[i].flags |= FR_VAL_PARAM;
        else
            g->values[i].flags &= ~FR_VAL_PARAM;
    }
}

int cli_info(int argc, char **argv)
{
    const char *model = NULL;
    cli_dims dims = {0};
    fr_train_options o;
    fr_train_options_default(&o);
    o.precision = "fp8";
    int64_t batch = 0, seq = 0;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (cli_is_help(argv[i])) {
            cli_info_help(stdout);
            cli_dims_free(&dims);
            return 0;
        }
        if (cli_compile_parse("info", argc, argv, &i, &o, &dims, &batch, &seq, &rc)) continue;
        if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("info", "unknown option '%s'", argv[i]);
        else if (model)
            rc = cli_usage("info", "only one MODEL may be given (got '%s' and '%s')", model, argv[i]);
        else
            model = argv[i];
    }
    if (rc == 0 && !model) rc = cli_usage("info", "no MODEL given");
    if (rc != 0) {
        cli_dims_free(&dims);
        return rc;
    }

    fr_graph *g = NULL;
    if (fr_onnx_load_file(model, &g) != FR_OK) {
        cli_dims_free(&dims);
        return cli_fail_status();
    }
    fr_fbs f;
    memset(&f, 0, sizeof f);
    int compiled = fr_fbs_is_compiled(g);
    if (compiled) {
        if (fr_fbs_decode(g, model, &f) != FR_OK) {
            fr_graph_free(g);
            cli_dims_free(&dims);
            return cli_fail_status();
        }
        params_from(g, f.graph);
    }
    print_model(g, model);
    rc = print_histogram(g, "  ");
    if (rc == 0 && compiled) {
        fflush(stdout);
        rc = print_compiled(&f);
        fr_fbs_free(&f);
        fr_graph_free(g);
        cli_dims_free(&dims);
        return rc;
    }
    if (rc == 0) {
        o.dims = dims.items;
        o.n_dims = dims.n;
        rc = print_linears_onnx(g, &o, batch, seq);
    }

    char open[512];
    fr_prepare_options opt;
    fr_prepare_options_default(&opt);
    opt.dims = dims.items;
    opt.n_dims = dims.n;
    for (int i = 0; i < dims.n; i++) fr_graph_fix_dim(g, dims.items[i].name, dims.items[i].value);
    open_dims(g, open, sizeof open);
    if (rc == 0 && open[0] && dims.n == 0) {
        printf("prepared       (give --dim NAME=VALUE for %s to see the prepared graph)\n", open);
    } else if (rc == 0) {
        /* prepare reports dims that are still open, or a --dim the model lacks, clearly */
        fr_prepare_stats st;
        fflush(stdout);
        if (fr_prepare_forward(g, &opt, &st) != FR_OK) {
            rc = cli_fail_status();
        } else {
            printf("prepared       %d nodes (%d folded, %d removed, %d Identity removed)\n",
                   g->n_nodes, st.nodes_folded, st.nodes_removed, st.identities_removed);
            printf("  outputs\n");
            print_values(g, g->outputs, g->n_outputs, "    ");
            printf("  op histogram\n");
            rc = print_histogram(g, "    ");
        }
    }
    fr_graph_free(g);
    cli_dims_free(&dims);
    return rc;
}
