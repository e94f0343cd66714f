/* `fp8run compile MODEL -o OUT.fbs --batch B --seq T [recipe options]`: prepare a model for
 * one batch x seq and compile it for FP8 (or BF16) training, written as a compiled graph file
 * that `fp8run train OUT.fbs` trains without compiling again (fp8run_model_write_compiled).
 * Also the option parsing `info` shares. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

void cli_compile_defaults(fp8run_train_config *o)
{
    cli_must(fp8run_train_config_init(o, sizeof *o));
    o->precision = "fp8";
}

void cli_compile_help(FILE *f)
{
    fp8run_train_config o;
    cli_compile_defaults(&o);
    fprintf(f,
            "usage: fp8run compile MODEL -o OUT.fbs --batch B --seq T [options]\n"
            "\n"
            "Prepare MODEL (ONNX) for B windows of T tokens and compile it for FP8 training, as\n"
            "`fp8run train --precision fp8` does on the fly, and write the compiled graph: a valid\n"
            "ONNX file (ai.fp8run::Linear nodes, fused weights, the FP8 scaling state, the\n"
            "decisions and the original model in its metadata). `fp8run train OUT.fbs` trains it\n"
            "without compiling again; export and checkpoints use the original names.\n"
            "\n"
            "A compiled graph is specialized to B x T (shape computations are folded), like a\n"
            "TensorRT engine: training it with another --batch/--seq is an error; compile again.\n"
            "\n"
            "options:\n"
            "  -o, --output OUT.fbs    where to write (required)\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n"
            "  -h, --help              show this help\n"
            "training options (--batch and --seq required):\n");
    cli_config_help(f, FP8RUN_OPTION_COMPILE, &o, cli_shape_options);
    fprintf(f,
            "\n"
            "Example:\n"
            "  fp8run compile model.onnx -o model.fbs --batch 8 --seq 512 --recipe delayed\n"
            "  fp8run info model.fbs\n"
            "  fp8run train model.fbs --data tokens.bin --steps 1000 --lr 3e-4\n");
}

int cli_compile_parse(const char *cmd, unsigned command, int argc, char **argv, int *i, fp8run_train_config *c,
                      cli_dims *dims, cli_given *given, int *rc)
{
    const char *v;
    int m;
    if (cli_config_option(cmd, command, argc, argv, i, c, given, rc)) return 1;
    if ((m = cli_option(argc, argv, i, cmd, "--dim", &v)) == 0) return 0;
    *rc = m < 0 ? CLI_EXIT_USAGE : cli_dims_add(dims, cmd, v);
    return 1;
}

int cli_compile(int argc, char **argv)
{
    const char *model = NULL, *out = NULL;
    fp8run_train_config o;
    cli_compile_defaults(&o);
    cli_dims dims = {0};
    cli_given given = {{0}};
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            cli_compile_help(stdout);
            cli_dims_free(&dims);
            return 0;
        }
        if (cli_compile_parse("compile", FP8RUN_OPTION_COMPILE, argc, argv, &i, &o, &dims, &given, &rc)) continue;
        if ((m = cli_option(argc, argv, &i, "compile", "-o", &v)) != 0 ||
            (m = cli_option(argc, argv, &i, "compile", "--output", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (out = v, 0);
        else if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("compile", "unknown option '%s'", argv[i]);
        else if (model)
            rc = cli_usage("compile", "only one MODEL may be given (got '%s' and '%s')", model, argv[i]);
        else
            model = argv[i];
    }
    if (rc == 0 && !model) rc = cli_usage("compile", "no MODEL given");
    if (rc == 0 && !out) rc = cli_usage("compile", "-o OUT.fbs is required");
    if (rc == 0 && (!cli_config_given(&given, "batch") || !cli_config_given(&given, "seq_len")))
        rc = cli_usage("compile", "--batch B and --seq T are required (a compiled graph is specialized to them)");
    if (rc == 0 && strcmp(o.precision, "fp32") == 0)
        rc = cli_usage("compile", "--precision fp32 leaves the model as it is: compile for fp8 or bf16, or "
                       "train the ONNX model");
    if (rc == 0) {
        cli_file in = {model, "model"}, outf = {out, "compiled graph (-o)"};
        rc = cli_check_files(&in, 1, &outf, 1);
    }
    if (rc != 0) {
        cli_dims_free(&dims);
        return rc;
    }
    o.dim_names = dims.names;
    o.dim_values = dims.values;
    o.n_dims = dims.n;
    fp8run_model *m = NULL;
    fp8run_model_info mi = {.struct_size = sizeof mi};
    fp8run_report *r = NULL;
    if (fp8run_model_load(model, &m) != FP8RUN_OK || fp8run_model_get_info(m, &mi) != FP8RUN_OK)
        rc = cli_fail_status();
    else if (mi.compiled)
        rc = cli_fail("'%s' is already a compiled graph: compile the original ONNX model", model);
    else if (fp8run_model_write_compiled(m, &o, out, &r) != FP8RUN_OK) /* reads what it wrote back */
        rc = cli_fail_status();
    if (rc == 0) {
        struct stat sb;
        char sz[32];
        printf("compiled %s -> %s (%s): batch %lld x seq %lld, precision %s\n", model, out,
               cli_human_bytes(stat(out, &sb) == 0 ? (uint64_t)sb.st_size : 0, sz, sizeof sz), (long long)o.batch,
               (long long)o.seq_len, o.precision);
        fputs(fp8run_report_text(r), stdout);
    }
    fp8run_report_destroy(r);
    fp8run_model_destroy(m);
    cli_dims_free(&dims);
    return rc;
}
