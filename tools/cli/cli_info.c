/* `fp8run info MODEL [--dim NAME=VALUE ...]`: what is in a model, and, once every input dim is
 * known, what the prepared graph looks like. */
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* info's defaults: compile's, and a 1 x 16 shape for the Linear analysis. */
static void info_defaults(fp8run_train_config *o)
{
    cli_compile_defaults(o);
    o->seq_len = 16;
}

void cli_info_help(FILE *f)
{
    fp8run_train_config o;
    info_defaults(&o);
    fprintf(f,
            "usage: fp8run info MODEL|COMPILED.fbs [--dim NAME=VALUE ...] [recipe options]\n"
            "       fp8run info --env\n"
            "\n"
            "Describe an ONNX model: producer, IR version, opsets, graph inputs and outputs with\n"
            "their dtypes and shapes (symbolic dims by name), the parameter count (elements of\n"
            "trainable float initializers), initializer bytes and a histogram of op types; then what\n"
            "training updates (name, shape, where it came from) and, for every other float\n"
            "initializer, why not (buffer, constant, scalar, additive mask, ...; --train/--freeze apply).\n"
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
            "  --memory[=cpu|cuda]     instead: the peak memory `fp8run train` with these options\n"
            "                          will hold, by part, planned without running (default: cuda\n"
            "                          when fp8run is built with it); on the GPU also where the\n"
            "                          activations peak and what is live there, by producing op;\n"
            "                          then what the passes after autodiff did (recompute, the\n"
            "                          weight gradients' inputs, the FP8 producers)\n"
            "  --gpus N                with --memory: the rank of N data-parallel ranks holding\n"
            "                          the most (--shard-optimizer, --shard-gradients); with\n"
            "                          --shard-parameters each rank's share and the sharding plan\n"
            "  --env                   instead: every environment variable fp8run reads, its type,\n"
            "                          default, reader and value now (no MODEL)\n"
            "  -h, --help              show this help\n"
            "training options (--batch/--seq: the shape the Linear analysis prepares for):\n");
    cli_config_help(f, FP8RUN_OPTION_INFO, &o, NULL);
}

/* `--env`: the table of environment variables (fp8run_env_knob) with the values set now. */
static int print_env(void)
{
    printf("%-24s %-7s %-8s %-28s %s\n", "variable", "type", "reader", "default", "value now / what it does");
    for (int i = 0; i < fp8run_env_count(); i++) {
        fp8run_env_info v = {.struct_size = sizeof v};
        if (fp8run_env_knob(i, &v) != FP8RUN_OK) return cli_fail_status();
        printf("%-24s %-7s %-8s %-28s %s%s%s\n", v.name, v.type, v.reader, v.dflt, v.value ? "'" : "(unset)",
               v.value ? v.value : "", v.value ? "'" : "");
        printf("%-24s %s\n", "", v.help);
    }
    return 0;
}

/* Which kernels the fused attention nodes will run on a GPU with these options. */
static void print_attention(const fp8run_train_config *o)
{
    const char *a = o->attention ? o->attention : "auto";
    int version = 0;
    const char *dnn = fp8run_cudnn_info(&version);
    if (strcmp(a, "fp8run") == 0)
        printf("attention      fp8run's kernels (--attention fp8run); %s\n", dnn);
    else if (version > 0)
        printf("attention      %s: cuDNN's fused flash attention for the nodes it takes, %s for the\n"
               "               others; it takes bf16/fp8 training's attention without an additive mask:\n"
               "               %s\n",
               dnn, strcmp(a, "auto") == 0 ? "fp8run's kernels" : "an error", fp8run_cudnn_attention_support());
    else if (strcmp(a, "auto") == 0)
        printf("attention      fp8run's kernels (--attention auto: %s)\n", dnn);
    else
        printf("attention      --attention cudnn will fail on a GPU: %s\n", dnn);
    if (o->deterministic && strcmp(a, "fp8run") != 0 && version > 0)
        printf("               --deterministic: cuDNN's engines without the NONDETERMINISTIC note only (its\n"
               "               dP-workspace backward); fp8run's kernels for a node none of them takes\n");
}

/* How the GEMMs will run on a GPU with these options (ops/cuda/cuda_gemm.h). */
static void print_gemm(const fp8run_train_config *o)
{
    const char *tune = fp8run_env_get("FP8RUN_GEMM_TUNE");
    printf("gemm           cuBLASLt, %s; fp8 forward GEMMs %s\n",
           o->deterministic                ? "the heuristic's first algorithm (--deterministic)"
           : tune && strcmp(tune, "0") == 0 ? "the heuristic's first algorithm (FP8RUN_GEMM_TUNE=0)"
                                            : "the fastest of up to 8 candidates timed per shape (FP8RUN_GEMM_TUNE=0: off)",
           o->fp8_fast_accum ? "with fast accumulation (--no-fp8-fast-accum: exact)" : "with exact accumulation");
}

/* The op histogram, most frequent first. */
static int print_histogram(const fp8run_model *m, const char *indent)
{
    fp8run_model_info mi = {.struct_size = sizeof mi};
    if (fp8run_model_get_info(m, &mi) != FP8RUN_OK) return cli_fail_status();
    for (int k = 0; k < mi.n_op_types; k++) {
        fp8run_op_info op = {.struct_size = sizeof op};
        if (fp8run_model_op(m, k, &op) != FP8RUN_OK) return cli_fail_status();
        printf("%s%-28s %d\n", indent, op.op_type, op.count);
    }
    return 0;
}

/* Graph inputs (outputs when `outputs`) with dtypes and shapes. */
static int print_values(const fp8run_model *m, int outputs, const char *indent)
{
    int n = outputs ? fp8run_model_output_count(m) : fp8run_model_input_count(m);
    for (int i = 0; i < n; i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        if ((outputs ? fp8run_model_output(m, i, &v) : fp8run_model_input(m, i, &v)) != FP8RUN_OK)
            return cli_fail_status();
        char shp[512];
        printf("%s%-28s %-9s %s\n", indent, v.name, fp8run_dtype_name(v.dtype), cli_shape_text(&v, shp, sizeof shp));
    }
    return 0;
}

static int print_model(const fp8run_model *m, const char *path)
{
    char a[64], b[64];
    fp8run_model_info mi = {.struct_size = sizeof mi};
    if (fp8run_model_get_info(m, &mi) != FP8RUN_OK) return cli_fail_status();
    printf("model          %s\n", path);
    printf("producer       %s%s%s\n", mi.producer_name[0] ? mi.producer_name : "(none)",
           mi.producer_version[0] ? " " : "", mi.producer_version);
    printf("ir_version     %lld\n", (long long)mi.ir_version);
    printf("opsets        ");
    for (int i = 0; i < mi.n_opsets; i++) {
        const char *domain;
        int64_t version;
        if (fp8run_model_opset(m, i, &domain, &version) != FP8RUN_OK) return cli_fail_status();
        printf("%s %s %lld", i ? "," : "", domain[0] ? domain : "ai.onnx", (long long)version);
    }
    printf("%s\n", mi.n_opsets ? "" : " (none)");
    if (mi.graph_name[0]) printf("graph          %s\n", mi.graph_name);
    printf("inputs         %d\n", fp8run_model_input_count(m));
    if (print_values(m, 0, "  ")) return CLI_EXIT_FAIL;
    printf("outputs        %d\n", fp8run_model_output_count(m));
    if (print_values(m, 1, "  ")) return CLI_EXIT_FAIL;

    int64_t params = fp8run_model_param_elements(m);
    int n_param_tensors = fp8run_model_param_count(m);
    printf("parameters     %s (%lld elements in %d tensor%s)\n", cli_human_count(params, a, sizeof a),
           (long long)params, n_param_tensors, n_param_tensors == 1 ? "" : "s");
    printf("initializers   %s (%llu bytes in %d tensor%s)\n", cli_human_bytes(mi.initializer_bytes, b, sizeof b),
           (unsigned long long)mi.initializer_bytes, mi.n_initializers, mi.n_initializers == 1 ? "" : "s");
    printf("nodes          %d\n", mi.n_nodes);
    printf("op histogram\n");
    return 0;
}

/* What `fp8run train` would update with these --train/--freeze, and for every other float
 * initializer why not (graph/params.h says the rule). */
static int print_trainable(const fp8run_model *m, const fp8run_train_config *o)
{
    regex_t tre, fre;
    int have_t = 0, have_f = 0, rc = 0, n = fp8run_model_float_initializer_count(m);
    if (o->train_regex && regcomp(&tre, o->train_regex, REG_EXTENDED | REG_NOSUB) == 0) have_t = 1;
    if (o->freeze_regex && regcomp(&fre, o->freeze_regex, REG_EXTENDED | REG_NOSUB) == 0) have_f = 1;
    int n_trained = 0, n_lost = 0, n_forced = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        printf(pass == 0 ? "trained\n" : "not trained (other float initializers)\n");
        for (int i = 0; i < n && rc == 0; i++) {
            fp8run_value_info v = {.struct_size = sizeof v};
            int param;
            const char *why;
            if (fp8run_model_float_initializer(m, i, &v, &param, &why) != FP8RUN_OK) {
                rc = cli_fail_status();
                break;
            }
            int sel_t = have_t && regexec(&tre, v.name, 0, NULL, 0) == 0;
            int frozen = have_f && regexec(&fre, v.name, 0, NULL, 0) == 0;
            int trained = !frozen && (param ? (!have_t || sel_t) : sel_t);
            if (trained != (pass == 0)) continue;
            char shp[512], note[700];
            if (!param && trained)
                snprintf(note, sizeof note, "selected by --train, but not a parameter: %s", why);
            else if (param && !trained)
                snprintf(note, sizeof note, "%s", frozen ? "frozen by --freeze" : "not selected by --train");
            else
                snprintf(note, sizeof note, "%s", why);
            printf("  %-44s %-14s %s\n", v.name, cli_shape_text(&v, shp, sizeof shp), note);
            n_trained += pass == 0;
            n_forced += !param && trained;
            n_lost += pass == 1 && strstr(why, "that parameter is not trained") != NULL;
        }
    }
    if (rc == 0 && n_trained == 0) printf("warning: nothing would be trained\n");
    if (rc == 0 && n_forced)
        printf("warning: --train selects %d initializer%s the model does not record as parameters (listed "
               "above)\n", n_forced, n_forced == 1 ? "" : "s");
    if (rc == 0 && n_lost)
        printf("warning: %d constant%s the exporter folded from parameters through ops fp8run cannot undo: "
               "those parameters are not trained (listed above)\n", n_lost, n_lost == 1 ? "" : "s");
    if (have_t) regfree(&tre);
    if (have_f) regfree(&fre);
    return rc;
}

/* Symbolic input dims without a value, as "batch, seq"; empty when none. */
static int open_dims(const fp8run_model *m, char *buf, size_t n)
{
    const char *seen[64];
    int n_seen = 0;
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < fp8run_model_input_count(m); i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        if (fp8run_model_input(m, i, &v) != FP8RUN_OK) return cli_fail_status();
        if (v.rank < 0 && off < n)
            off += (size_t)snprintf(buf + off, n - off, "%s(shape of '%s')", off ? ", " : "", v.name);
        for (int d = 0; d < v.rank && d < FP8RUN_MAX_RANK; d++) {
            const char *p = v.dim_names[d];
            if (v.dims[d] >= 0) continue;
            if (!p) p = "(unnamed)";
            int dup = 0;
            for (int k = 0; k < n_seen && !dup; k++) dup = strcmp(seen[k], p) == 0;
            if (dup) continue;
            if (n_seen < 64) seen[n_seen++] = p;
            if (off < n) off += (size_t)snprintf(buf + off, n - off, "%s%s", off ? ", " : "", p);
        }
    }
    return 0;
}

/* What each pass of the training pipeline did, in the order they ran. */
static int print_passes(const fp8run_report *r)
{
    int n = fp8run_report_pass_count(r);
    if (n) printf("Training pipeline (graph passes before autodiff, in order)\n");
    for (int i = 0; i < n; i++) {
        fp8run_pass_info p = {.struct_size = sizeof p};
        if (fp8run_report_pass(r, i, &p) != FP8RUN_OK) return cli_fail_status();
        printf("  pass %s: %s\n", p.name, p.detail);
    }
    return 0;
}

/* The FP8 compile decisions for an ONNX model, with the info command's options. */
static int print_linears_onnx(const fp8run_model *m, fp8run_train_config *o, int64_t batch, int64_t seq)
{
    printf("Linear layers (FP8 compile with these options; `fp8run compile` would record them)\n");
    if (strcmp(o->precision, "fp32") == 0) {
        printf("  precision fp32: no Linear is rewritten\n");
        return 0;
    }
    /* without --batch/--seq, the tokens input's static dims give them (an export at fixed
     * shapes can only be compiled at those), else a --dim that names its symbolic dims */
    for (int i = 0; i < fp8run_model_input_count(m); i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        if (fp8run_model_input(m, i, &v) != FP8RUN_OK) return cli_fail_status();
        if ((v.dtype != FP8RUN_DTYPE_INT64 && v.dtype != FP8RUN_DTYPE_INT32) || v.rank != 2) continue;
        if (!batch && v.dims[0] > 0) batch = v.dims[0];
        if (!seq && v.dims[1] > 0) seq = v.dims[1];
        for (int k = 0; k < o->n_dims; k++) {
            if (!batch && v.dim_names[0] && strcmp(o->dim_names[k], v.dim_names[0]) == 0) batch = o->dim_values[k];
            if (!seq && v.dim_names[1] && strcmp(o->dim_names[k], v.dim_names[1]) == 0) seq = o->dim_values[k];
        }
        break;
    }
    o->batch = batch ? batch : 1;
    o->seq_len = seq ? seq : 16;
    fp8run_report *r = NULL;
    if (fp8run_model_compile(m, o, &r) != FP8RUN_OK) {
        /* not a model the trainer can take as it is: say why, the rest of info stands */
        printf("  not available: %s\n", cli_last_error());
        return 0;
    }
    fputs(fp8run_report_text(r), stdout);
    if (fp8run_report_layer_count(r) == 0) printf("  (no MatMul/Gemm with a trainable 2-D weight)\n");
    int rc = print_passes(r);
    if (rc == 0 && (!o->chunked_lm_head || strcmp(o->chunked_lm_head, "off") != 0))
        printf("  pass chunked_lm_head: after autodiff%s: the LM head and the loss in chunks of tokens (`info --memory` "
               "says what it fused and the bytes it saves)\n",
               o->chunked_lm_head && strcmp(o->chunked_lm_head, "on") == 0 ? "" : ", when training on a GPU (auto)");
    const char *slow = fp8run_report_slow_path(r);
    if (rc == 0 && slow) fputs(slow, stdout); /* the training graph's nodes off the fast path, with the reason */
    fp8run_report_destroy(r);
    return rc;
}

/* A compiled graph: what it is specialized to, the recorded decisions and the scaling state. */
static int print_compiled(const fp8run_report *r)
{
    fp8run_compiled_info c = {.struct_size = sizeof c};
    if (fp8run_report_compiled(r, &c) != FP8RUN_OK) return cli_fail_status();
    printf("compiled graph (fp8run format %d)\n", c.format);
    printf("  specialized to batch %lld x seq %lld (tokens input '%s'); recompile for another shape\n",
           (long long)c.batch, (long long)c.seq_len, c.tokens_input);
    for (int i = 0; i < c.n_dims; i++) printf("  --dim %s=%lld\n", c.dim_names[i], (long long)c.dim_values[i]);
    if (c.train_regex || c.freeze_regex)
        printf("  trained: --train %s --freeze %s\n", c.train_regex ? c.train_regex : "(all)",
               c.freeze_regex ? c.freeze_regex : "(none)");
    printf("  original model: %d nodes, %d initializers (export and checkpoints use its names)\n", c.original_nodes,
           c.original_initializers);
    for (int i = 0; i < c.n_ties; i++)
        printf("  re-tied: '%s' follows '%s'%s\n", c.tie_copies[i], c.tie_sources[i],
               c.tie_transposed[i] ? " (transposed)" : "");
    printf("Linear layers (recorded at compile time and checked against the graph; the weights and reasons\n"
           "  are informative: training reads the graph itself)\n");
    fputs(fp8run_report_text(r), stdout);
    int n = fp8run_report_state_count(r);
    if (n == 0) return 0;
    int fresh = 1;
    for (int i = 0; i < n; i++) {
        fp8run_scaling_info s = {.struct_size = sizeof s};
        if (fp8run_report_state(r, i, &s) != FP8RUN_OK) return cli_fail_status();
        fresh = fresh && s.updates == 0;
    }
    printf("FP8 scaling state (%d operands%s)\n", n, fresh ? ", fresh: scale 1, empty history" : "");
    if (fresh) return 0;
    printf("  %-48s %-3s %-5s %12s %12s %8s\n", "layer", "op", "fmt", "scale", "amax (hist)", "updates");
    for (int i = 0; i < n; i++) {
        fp8run_scaling_info s = {.struct_size = sizeof s};
        if (fp8run_report_state(r, i, &s) != FP8RUN_OK) return cli_fail_status();
        printf("  %-48s %-3s %-5s %12.6g %12.6g %8lld\n", s.layer, s.operand, s.format, (double)(float)s.scale,
               (double)(float)s.amax, (long long)s.updates);
    }
    return 0;
}

/* `--memory`: the prediction of fp8run_model_predict_memory, by part. */
static int print_memory(const fp8run_model *m, fp8run_train_config *o, const cli_dims *dims, const char *backend)
{
    o->dim_names = dims->names;
    o->dim_values = dims->values;
    o->n_dims = dims->n;
    fp8run_memory_report r = {.struct_size = sizeof r};
    if (fp8run_model_predict_memory(m, o, backend, &r) != FP8RUN_OK) return cli_fail_status();
    const double M = 1024.0 * 1024.0;
    printf("memory         predicted peak of `fp8run train` on the %s, batch %lld x seq %lld, optimizer state %s",
           r.gpu ? "GPU" : "CPU", (long long)o->batch, (long long)o->seq_len, o->optimizer_state);
    if (o->world_size > 1 && o->shard_parameters) /* the shares do not depend on the backend */
        printf(", one of %d ranks (sharded parameters, ZeRO-3)", o->world_size);
    else if (o->world_size > 1 && r.gpu) /* data parallel runs on GPUs only */
        printf(", one of %d ranks%s", o->world_size,
               o->shard_gradients ? " (ZeRO-2)" : o->shard_optimizer ? " (ZeRO-1)" : "");
    printf(":\n");
    /* none kept on the GPU though the Linears are bf16/fp8: say where they went (tr_weight_cache) */
    const int codes_in_scratch = r.gpu && !r.fp8_weights && o->precision && strcmp(o->precision, "fp32") != 0;
    const char *codes_note =
        codes_in_scratch ? " (made in each Linear's scratch at every use; FP8RUN_WEIGHT_CACHE=1 keeps them)" : "";
    const struct {
        const char *name;
        uint64_t v;
        const char *note;
    } rows[] = {{"parameters", r.params, ""},
                {"gradient buffers", r.grads, ""},
                {"optimizer state", r.optimizer_state, ""},
                {"FP8 weight codes", r.fp8_weights, codes_note},
                {"activations", r.activations, ""},
                {"evaluation", r.eval_activations, ""},
                {"inputs", r.inputs, ""},
                {"workspace", r.workspace, ""}};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        printf("  %-20s %12.1f MiB%s\n", rows[k].name, (double)rows[k].v / M, rows[k].note);
    if (o->shard_parameters) printf("  %-20s %12.1f MiB\n", "gathered weights", (double)r.gathered_weights / M);
    printf("  %-20s %12.1f MiB (%.2f GiB)\n", "total", (double)r.total / M, (double)r.total / M / 1024.0);
    if (r.lm_heads_fused || (o->chunked_lm_head && strcmp(o->chunked_lm_head, "on") == 0)) /* left out above */
        printf("  %-20s %12.1f MiB of logits and their gradient not held whole (%llu LM head%s fused)\n",
               "chunked LM head", (double)r.lm_head_saved / M, (unsigned long long)r.lm_heads_fused,
               r.lm_heads_fused == 1 ? "" : "s");
    if (r.activations_peak[0]) printf("  %-20s %s\n", "activations' peak", r.activations_peak);
    /* the passes on the backward, which decide much of the activations' figure */
    for (const char *l = r.backward_passes; *l;) {
        const char *e = strchr(l, '\n');
        const int len = e ? (int)(e - l) : (int)strlen(l);
        printf("  %-20s %.*s\n", l == r.backward_passes ? "after autodiff" : "", len, l);
        l += len + (e != NULL);
    }
    if (!o->shard_parameters || o->world_size < 2) return 0;
    /* which rank holds what: the plan the figures come from */
    fp8run_shard_plan *p = NULL;
    if (fp8run_model_shard_plan(m, o, o->world_size, &p) != FP8RUN_OK) return cli_fail_status();
    printf("sharding       %s", fp8run_shard_plan_text(p));
    fp8run_shard_plan_destroy(p);
    return 0;
}

int cli_info(int argc, char **argv)
{
    const char *model = NULL, *memory = NULL;
    cli_dims dims = {0};
    fp8run_train_config o;
    info_defaults(&o);
    cli_given given = {{0}};
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (cli_is_help(argv[i])) {
            cli_info_help(stdout);
            cli_dims_free(&dims);
            return 0;
        }
        if (strcmp(argv[i], "--env") == 0) {
            cli_dims_free(&dims);
            return print_env();
        }
        if (strcmp(argv[i], "--memory") == 0 || strncmp(argv[i], "--memory=", 9) == 0) {
            memory = argv[i][8] ? argv[i] + 9 : "auto";
            if (!memory[0]) rc = cli_usage("info", "--memory=: an empty value");
            continue;
        }
        if (strcmp(argv[i], "--gpus") == 0) { /* the memory plan of one of N data-parallel ranks */
            char *end = NULL;
            long g = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (!end || *end || g < 1 || g > 4096) {
                rc = cli_usage("info", "--gpus needs a GPU count (1 to 4096)");
                continue;
            }
            o.world_size = g > 1 ? (int)g : 0;
            i++;
            continue;
        }
        if (cli_compile_parse("info", FP8RUN_OPTION_INFO, argc, argv, &i, &o, &dims, &given, &rc)) continue;
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

    fp8run_model *m = NULL;
    fp8run_model_info mi = {.struct_size = sizeof mi};
    if (fp8run_model_load(model, &m) != FP8RUN_OK || fp8run_model_get_info(m, &mi) != FP8RUN_OK) {
        fp8run_model_destroy(m);
        cli_dims_free(&dims);
        return cli_fail_status();
    }
    if (mi.compiled) {
        /* the whole file is decoded and checked before anything is printed */
        fp8run_report *r = NULL;
        if (fp8run_model_report(m, &r) != FP8RUN_OK) rc = cli_fail_status();
        if (rc == 0) rc = print_model(m, model);
        if (rc == 0) rc = print_histogram(m, "  ");
        if (rc == 0) {
            fflush(stdout);
            rc = print_compiled(r);
        }
        if (rc == 0) print_attention(&o);
        if (rc == 0) print_gemm(&o);
        fp8run_report_destroy(r);
        fp8run_model_destroy(m);
        cli_dims_free(&dims);
        return rc;
    }
    rc = print_model(m, model);
    if (rc == 0 && memory) {
        rc = print_histogram(m, "  ");
        if (rc == 0) rc = print_memory(m, &o, &dims, memory);
        fp8run_model_destroy(m);
        cli_dims_free(&dims);
        return rc;
    }
    if (rc == 0) rc = print_histogram(m, "  ");
    if (rc == 0) rc = print_trainable(m, &o);
    if (rc == 0) {
        o.dim_names = dims.names;
        o.dim_values = dims.values;
        o.n_dims = dims.n;
        rc = print_linears_onnx(m, &o, cli_config_given(&given, "batch") ? o.batch : 0,
                                cli_config_given(&given, "seq_len") ? o.seq_len : 0);
    }

    char open[512] = "";
    if (rc == 0 && dims.n == 0) rc = open_dims(m, open, sizeof open);
    if (rc == 0 && open[0]) {
        printf("prepared       (give --dim NAME=VALUE for %s to see the prepared graph)\n", open);
    } else if (rc == 0) {
        /* preparing reports dims that are still open, or a --dim the model lacks, clearly */
        fp8run_prepare_config pc;
        cli_must(fp8run_prepare_config_init(&pc, sizeof pc));
        pc.dim_names = dims.names;
        pc.dim_values = dims.values;
        pc.n_dims = dims.n;
        fp8run_prepare_stats st = {.struct_size = sizeof st};
        fp8run_model *p = NULL;
        fp8run_model_info pi = {.struct_size = sizeof pi};
        fflush(stdout);
        if (fp8run_model_prepare(m, &pc, &p, &st) != FP8RUN_OK || fp8run_model_get_info(p, &pi) != FP8RUN_OK) {
            rc = cli_fail_status();
        } else {
            printf("prepared       %d nodes (%d folded, %d removed, %d Identity removed)\n", pi.n_nodes,
                   st.nodes_folded, st.nodes_removed, st.identities_removed);
            printf("  outputs\n");
            rc = print_values(p, 1, "    ");
            if (rc == 0) printf("  op histogram\n");
            if (rc == 0) rc = print_histogram(p, "    ");
        }
        fp8run_model_destroy(p);
    }
    if (rc == 0) print_attention(&o);
    if (rc == 0) print_gemm(&o);
    fp8run_model_destroy(m);
    cli_dims_free(&dims);
    return rc;
}
