/* The FP8 compile pass (see fp8_compile.h): find Linear layers (fp8_detect.c), group the ones
 * sharing an input, decide precisions (here), rewrite into ai.fp8run::Linear (+ Split for fused
 * groups; fp8_rewrite.c), report (fp8_report.c). */
#include "passes/fp8_compile.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fp8_compile_internal.h"

void fr_fp8_options_default(fr_fp8_options *o)
{
    memset(o, 0, sizeof *o);
    o->precision = "fp8";
    o->recipe = "delayed";
    o->fp8_format = "hybrid";
    o->bf16_boundary = 1;
    o->fp8_exclude = NULL;
    o->fuse = 1;
    o->pad_multiple = 16;
    o->margin = 0;
    o->amax_history_len = 1024;
    o->amax_algo = FR_AMAX_MAX;
    o->interval = 1;
}

/* ---- precision decisions ---- */

typedef struct grp {
    int *m;
    int n;
} grp;

/* Is node t a Transpose that swaps the last two dims of its input (and keeps the others)? */
static int swaps_last2(const fr_graph *g, const fr_node *t)
{
    if (t->dead || strcmp(t->op_type, "Transpose") != 0 || t->domain[0] || t->n_inputs != 1 || t->inputs[0] < 0)
        return 0;
    const fr_attr *a = fr_node_attr(t, "perm");
    int r = g->values[t->inputs[0]].rank;
    if (!a || a->type != FR_ATTR_INTS || a->n != r || r < 2) return 0;
    for (int k = 0; k < r - 2; k++)
        if (a->ints[k] != k) return 0;
    return a->ints[r - 2] == r - 1 && a->ints[r - 1] == r - 2;
}

static int n_readers(const fr_graph *g, int v)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++) n += !g->nodes[i].dead && g->nodes[i].inputs[k] == v;
    for (int i = 0; i < g->n_outputs; i++) n += g->outputs[i] == v;
    return n;
}

/* bf16/fp8 training: the MatMuls of two activations (attention scores and values) become
 * ai.fp8run::MatMul with precision bf16, as autocast runs them; a Transpose of the last two
 * dims feeding one of them (the keys, transposed for Q K^T) becomes its transA/transB flag, so
 * no transposed copy is made, forward or backward. */
static fr_status lower_activation_matmuls(fr_graph *g, int *count)
{
    *count = 0;
    const fr_op_def *mmx = fr_op_find(FR_DOMAIN_FP8RUN, "MatMul");
    if (!mmx) return fr_error(FR_ERR_INTERNAL, "ai.fp8run::MatMul is not registered");
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (n->dead || n->domain[0] || strcmp(n->op_type, "MatMul") != 0 || n->n_inputs != 2) continue;
        int eligible = 1;
        for (int k = 0; k < 2; k++) {
            const fr_value *v = n->inputs[k] >= 0 ? &g->values[n->inputs[k]] : NULL;
            eligible = eligible && v && v->dtype == FR_F32 && v->rank >= 2 && !v->constant &&
                       !(v->flags & FR_VAL_PARAM);
        }
        if (!eligible) continue;
        int trans[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            int v = n->inputs[k], p = g->values[v].producer;
            if (p >= 0 && swaps_last2(g, &g->nodes[p]) && n_readers(g, v) == 1) {
                n->inputs[k] = g->nodes[p].inputs[0];
                g->nodes[p].dead = 1; /* removed with the other dead nodes */
                trans[k] = 1;
            }
        }
        free(n->domain);
        n->domain = fr_strdup(FR_DOMAIN_FP8RUN, "fp8 compile");
        if (!n->domain) return FR_ERR_OOM;
        n->op = mmx;
        FR_TRY(fr_node_set_attr_string(n, "precision", "bf16"));
        if (trans[0]) FR_TRY(fr_node_set_attr_int(n, "transA", 1));
        if (trans[1]) FR_TRY(fr_node_set_attr_int(n, "transB", 1));
        FR_TRY(mmx->infer(g, i));
        (*count)++;
    }
    return *count ? fr_graph_compact(g) : FR_OK;
}

/* bf16/fp8 training: fused attention (ai.fp8run::Attention, emitted before this pass) runs its
 * products in bf16 too, as the unfused MatMuls above would. */
static fr_status attention_to_bf16(fr_graph *g, int *count)
{
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0 || strcmp(n->op_type, "Attention") != 0) continue;
        FR_TRY(fr_node_set_attr_string(n, "precision", "bf16"));
        (*count)++;
    }
    return FR_OK;
}

static fr_status run_pass(pass *p, regex_t *re)
{
    fr_graph *g = p->g;
    FR_TRY(fr_graph_toposort(g));
    FR_TRY(fr_fp8_count_uses(p));
    for (int n = 0; n < g->n_nodes; n++) FR_TRY(fr_fp8_detect(p, n));
    for (int i = 0; i < p->nc; i++)
        /* by weight name or, for exports whose weights are anonymous ("onnx::MatMul_12"), by
           the node name ("/h.0/mlp/c_proj/MatMul") */
        p->c[i].excluded = re && (regexec(re, g->values[p->c[i].w].name, 0, NULL, 0) == 0 ||
                                  regexec(re, g->nodes[p->c[i].node].name, 0, NULL, 0) == 0);

    /* groups: same input, both exclusive, same exclusion and bias presence; node order */
    grp *gs = fr_calloc((size_t)p->nc + 1, sizeof *gs, "fp8 compile");
    int ng = 0;
    fr_status st = gs ? FR_OK : FR_ERR_OOM;
    for (int i = 0; i < p->nc && st == FR_OK; i++) {
        if (p->c[i].group >= 0) continue;
        grp *G = &gs[ng];
        G->m = fr_malloc((size_t)(p->nc - i) * sizeof(int), "fp8 compile");
        if (!G->m) {
            st = FR_ERR_OOM;
            break;
        }
        p->c[i].group = ng;
        G->m[G->n++] = i;
        const cand *ci = &p->c[i];
        for (int j = i + 1; p->opt->fuse && ci->exclusive && !ci->frozen && j < p->nc; j++) {
            cand *cj = &p->c[j];
            if (cj->group < 0 && cj->exclusive && !cj->frozen && cj->x == ci->x && cj->excluded == ci->excluded &&
                (cj->bias >= 0) == (ci->bias >= 0)) {
                cj->group = ng;
                G->m[G->n++] = j;
            }
        }
        ng++;
    }
    for (int gi = 0; gi < ng && st == FR_OK; gi++) {
        const grp *G = &gs[gi];
        const cand *c0 = &p->c[G->m[0]];
        fr_lin_precision prec = p->prec;
        char why[1400];
        int B = p->opt->bf16_boundary;
        if (p->prec != FR_LIN_FP8) {
            snprintf(why, sizeof why, "precision %s requested", fr_lin_precision_name(p->prec));
        } else if (c0->excluded) {
            prec = FR_LIN_BF16;
            snprintf(why, sizeof why, "excluded by fp8_exclude '%s'", p->opt->fp8_exclude);
        } else if (gi < B) {
            prec = FR_LIN_BF16;
            snprintf(why, sizeof why, "boundary: first Linear group%s (bf16_boundary %d)",
                     gi ? "s" : "", B);
        } else if (gi >= ng - B) {
            prec = FR_LIN_BF16;
            snprintf(why, sizeof why, "boundary: last Linear group%s (LM head) (bf16_boundary %d)",
                     gi < ng - 1 ? "s" : "", B);
        } else {
            snprintf(why, sizeof why, "fp8");
        }
        size_t wl = strlen(why);
        if (G->n > 1) {
            snprintf(why + wl, sizeof why - wl, "; fused %d Linears sharing input '%s'", G->n,
                     g->values[c0->x].name);
        } else if (p->opt->fuse && !c0->exclusive) {
            for (int j = 0; j < p->nc; j++)
                if (j != G->m[0] && p->c[j].x == c0->x) {
                    snprintf(why + wl, sizeof why - wl, "; not fused: its weight or bias is also "
                             "used elsewhere");
                    break;
                }
        }
        st = fr_fp8_rewrite_group(p, G->m, G->n, prec, why);
    }
    for (int gi = 0; gi < ng; gi++) free(gs[gi].m);
    free(gs);
    FR_TRY(st);
    if (ng > 0) FR_TRY(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1)); /* valid ONNX */
    FR_TRY(fr_graph_compact(g));
    return fr_graph_toposort(g);
}

fr_status fr_fp8_compile(fr_graph *g, const fr_fp8_options *opt, fr_fp8_report *report)
{
    memset(report, 0, sizeof *report);
    fr_fp8_options dflt;
    if (!opt) {
        fr_fp8_options_default(&dflt);
        opt = &dflt;
    }
    pass p;
    memset(&p, 0, sizeof p);
    p.g = g;
    p.opt = opt;
    p.r = report;
    if (fr_lin_precision_parse(opt->precision ? opt->precision : "(null)", &p.prec) != FR_OK ||
        fr_lin_recipe_parse(opt->recipe ? opt->recipe : "(null)", &p.recipe) != FR_OK)
        return fr_error_context(FR_ERR_INVALID_ARG, "fp8 compile");
    const char *fmt = opt->fp8_format ? opt->fp8_format : "(null)";
    if (strcmp(fmt, "hybrid") != 0 && strcmp(fmt, "e4m3") != 0)
        return fr_error(FR_ERR_INVALID_ARG, "fp8 compile: fp8_format '%s' is not one of hybrid, e4m3", fmt);
    if (opt->bf16_boundary < 0 || opt->pad_multiple < 1 || opt->pad_multiple > 4096 ||
        opt->margin < -64 || opt->margin > 64)
        return fr_error(FR_ERR_INVALID_ARG, "fp8 compile: bf16_boundary %d, pad_multiple %d or margin "
                        "%d out of range (>= 0, 1..4096, -64..64)", opt->bf16_boundary,
                        opt->pad_multiple, opt->margin);
    fr_fp8_scaling_params sp = {opt->amax_history_len, opt->amax_algo, opt->margin, opt->interval, FR_F8E4M3};
    fr_fp8_scaling probe;
    FR_TRY(fr_fp8_scaling_init(&probe, &sp)); /* validates the delayed recipe's parameters */
    fr_fp8_scaling_free(&probe);
    regex_t re;
    int have_re = opt->fp8_exclude && opt->fp8_exclude[0];
    if (have_re) {
        int rc = regcomp(&re, opt->fp8_exclude, REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char msg[256];
            regerror(rc, &re, msg, sizeof msg);
            return fr_error(FR_ERR_INVALID_ARG, "fp8 compile: fp8_exclude '%s' is not a valid regular "
                            "expression: %s", opt->fp8_exclude, msg);
        }
    }
    report->precision = p.prec;
    report->recipe = p.recipe;
    report->e4m3_only = strcmp(fmt, "e4m3") == 0;
    report->bf16_boundary = opt->bf16_boundary;
    report->fuse = opt->fuse;
    report->pad_multiple = opt->pad_multiple;
    report->margin = opt->margin;
    report->amax_history_len = opt->amax_history_len;
    report->amax_algo = opt->amax_algo;
    report->interval = opt->interval;
    fr_status st = FR_OK;
    if (have_re) {
        report->fp8_exclude = fr_strdup(opt->fp8_exclude, "fp8 report");
        if (!report->fp8_exclude) st = FR_ERR_OOM;
    }
    if (st == FR_OK) st = run_pass(&p, have_re ? &re : NULL);
    if (st == FR_OK && p.prec != FR_LIN_FP32) st = lower_activation_matmuls(g, &report->n_activation_matmuls);
    if (st == FR_OK && p.prec != FR_LIN_FP32) st = attention_to_bf16(g, &report->n_attention);
    if (have_re) regfree(&re);
    free(p.uses);
    free(p.consumer);
    free(p.c);
    if (st != FR_OK) {
        st = fr_error_context(st, "fp8 compile");
        fr_fp8_report_free(report);
    }
    return st;
}

