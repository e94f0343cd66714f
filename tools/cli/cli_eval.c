/* `fp8run eval`: mean next-token loss and perplexity of a model or a checkpoint's weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_sft.h"
#include "cli_train_args.h"

void cli_eval_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run eval MODEL|COMPILED.fbs|CKPT --data FILE --batch B --seq T [options]\n"
            "\n"
            "Mean next-token cross-entropy and perplexity of a model (ONNX) or of a training\n"
            "checkpoint's weights (the model comes from --model or the checkpoint's record) over\n"
            "sequential batches of B windows of T+1 tokens. Prints 'loss L perplexity P'. On an\n"
            "SFT token file (prepare --sft) the loss is the mean over its target tokens only.\n"
            "\n"
            "options:\n"
            "  --data FILE             tokens (raw uint16/uint32 or llm.c token file, or an SFT token file)\n"
            "  --data-dtype uint8|uint16|uint32\n"
            "  --batches N             batches to evaluate (default 0: the whole file)\n"
            "  --model MODEL           the ONNX model (or compiled graph) a checkpoint belongs to\n"
            "  --device auto|cuda|cpu  where to run (default auto: the GPU when one is usable)\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n");
    train_args_help(f, FP8RUN_OPTION_EVAL, "--batch and --seq", cli_shape_options);
}

int cli_eval(int argc, char **argv)
{
    train_args a;
    train_args_init(&a, FP8RUN_OPTION_EVAL);
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            cli_eval_help(stdout);
            cli_dims_free(&a.dims);
            return 0;
        }
        if (train_args_option("eval", argc, argv, &i, &a, &rc)) continue;
        if ((m = cli_option(argc, argv, &i, "eval", "--batches", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : cli_int64("eval", "--batches", v, 0, &a.batches);
        else if ((m = cli_option(argc, argv, &i, "eval", "--model", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (a.model_opt = v, 0);
        else if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("eval", "unknown option '%s'", argv[i]);
        else if (a.model)
            rc = cli_usage("eval", "only one MODEL|CKPT may be given (got '%s' and '%s')", a.model, argv[i]);
        else
            a.model = argv[i];
    }
    train_args_given_shape(&a);
    if (rc == 0 && !a.model) rc = cli_usage("eval", "no MODEL or CKPT given");
    if (rc == 0 && !a.data) rc = cli_usage("eval", "--data FILE is required");
    if (rc == 0) rc = cli_sft_setup("eval", &a);
    fp8run_model *mdl = NULL;
    fp8run_session *t = NULL;
    fp8run_data_loader *dl = NULL;
    int64_t *w = NULL;
    if (rc == 0) rc = cli_load_model_or_ckpt(a.model, a.model_opt, &mdl);
    if (rc == 0) rc = train_args_shape_from_model("eval", &a, mdl); /* a compiled graph gives batch x seq */
    if (rc == 0) {
        a.o.batch = a.batch;
        a.o.seq_len = a.seq;
        a.o.dim_names = a.dims.names;
        a.o.dim_values = a.dims.values;
        a.o.n_dims = a.dims.n;
        a.o.eval_only = 1;
        cli_sft_size(&a, &a.o);
        if (fp8run_session_create(mdl, a.device, &a.o, &t) != FP8RUN_OK) rc = cli_fail_status();
    }
    if (rc == 0) {
        fp8run_data_config d = train_args_data_config(&a, fp8run_session_vocab(t));
        if (fp8run_data_open_val(a.data, &d, a.batches, &dl) != FP8RUN_OK)
            rc = cli_fail("--data: %s", cli_last_error());
    }
    const size_t per = (size_t)(a.batch * (a.seq + 1));
    w = malloc((per ? per : 1) * sizeof *w);
    if (rc == 0 && !w) rc = cli_fail("out of memory");
    if (rc == 0 && a.o.sft) {
        double loss;
        int64_t targets;
        cli_sft_describe("--data", dl, a.seq);
        cli_sft_warn_positions(&a, t);
        rc = cli_sft_eval(t, dl, &loss, &targets);
        if (rc == 0)
            printf("loss %.6f perplexity %.4f (%lld target tokens in %lld batches of %lld x %lld tokens)\n", loss,
                   exp(loss), (long long)targets, (long long)fp8run_data_batches_per_epoch(dl), (long long)a.batch,
                   (long long)a.seq);
    } else if (rc == 0) {
        int64_t n = fp8run_data_batches_per_epoch(dl);
        double sum = 0;
        for (int64_t b = 0; b < n && rc == 0; b++) {
            double l;
            if (fp8run_data_next(dl, FP8RUN_DTYPE_INT64, w, per) != FP8RUN_OK ||
                fp8run_session_eval(t, w, FP8RUN_DTYPE_INT64, per, &l) != FP8RUN_OK)
                rc = cli_fail_status();
            else
                sum += l;
        }
        if (rc == 0) {
            double loss = sum / (double)n;
            printf("loss %.6f perplexity %.4f (%lld batches of %lld x %lld tokens)\n", loss, exp(loss), (long long)n,
                   (long long)a.batch, (long long)a.seq);
        }
    }
    free(w);
    fp8run_data_close(dl);
    fp8run_session_destroy(t);
    fp8run_model_destroy(mdl);
    cli_dims_free(&a.dims);
    return rc;
}
