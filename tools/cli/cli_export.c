/* `fp8run export`: a checkpoint's weights into the original model, or as safetensors. */
#include <stdlib.h>
#include <string.h>

#include "cli_train_args.h"

void cli_export_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run export CKPT [--model MODEL] -o OUT.onnx\n"
            "       fp8run export CKPT --safetensors DIR [--dtype fp32|bf16] [--max-shard-mb N]\n"
            "\n"
            "Write MODEL with the checkpoint's trained weights in its initializers (original names\n"
            "and layouts). A checkpoint holds weights only; the graph comes from --model, or from\n"
            "the model path the checkpoint recorded. Weights go to external data OUT.onnx.data\n"
            "when they add up to more than 1 GiB.\n"
            "\n"
            "options:\n"
            "  --model MODEL           the ONNX model that was trained, or the compiled graph (.fbs)\n"
            "                          it was trained as (the original model is written)\n"
            "  -o, --output OUT.onnx   where to write\n"
            "  --safetensors DIR       write the checkpoint's weights as a Hugging Face checkpoint instead\n"
            "                          (no model needed): DIR/model.safetensors (the trained parameters'\n"
            "                          names and shapes, sorted), or shards with\n"
            "                          model.safetensors.index.json beyond --max-shard-mb\n"
            "  --dtype fp32|bf16       the safetensors' dtype (default fp32; bf16 rounds to nearest even)\n"
            "  --max-shard-mb N        largest shard (default 5000, transformers' 5GB)\n"
            "  -h, --help              show this help\n");
}

int cli_export(int argc, char **argv)
{
    const char *ckpt = NULL, *model = NULL, *out = NULL, *st_dir = NULL, *st_dtype = NULL;
    int64_t max_mb = 0;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            cli_export_help(stdout);
            return 0;
        }
        if ((m = cli_option(argc, argv, &i, "export", "--model", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (model = v, 0);
        else if ((m = cli_option(argc, argv, &i, "export", "-o", &v)) != 0 ||
                 (m = cli_option(argc, argv, &i, "export", "--output", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (out = v, 0);
        else if ((m = cli_option(argc, argv, &i, "export", "--safetensors", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (st_dir = v, 0);
        else if ((m = cli_option(argc, argv, &i, "export", "--dtype", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (st_dtype = v, 0);
        else if ((m = cli_option(argc, argv, &i, "export", "--max-shard-mb", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : cli_int64("export", "--max-shard-mb", v, 1, &max_mb);
        else if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("export", "unknown option '%s'", argv[i]);
        else if (ckpt)
            rc = cli_usage("export", "only one CKPT may be given (got '%s' and '%s')", ckpt, argv[i]);
        else
            ckpt = argv[i];
    }
    if (rc) return rc;
    if (!ckpt) return cli_usage("export", "no CKPT given");
    if (!out && !st_dir) return cli_usage("export", "-o OUT.onnx is required (or --safetensors DIR)");
    if (out && st_dir) return cli_usage("export", "give -o OUT.onnx or --safetensors DIR, not both");
    if (!st_dir && (st_dtype || max_mb)) return cli_usage("export", "--dtype and --max-shard-mb need --safetensors DIR");
    cli_file in[2] = {{ckpt, "checkpoint"}, {model, "model (--model)"}}, outf = {out, "export (-o)"};
    if (cli_check_files(in, 2, &outf, 1)) return CLI_EXIT_FAIL;
    if (!fp8run_is_checkpoint(ckpt)) return cli_fail("'%s' is not an fp8run checkpoint", ckpt);
    if (st_dir) return cli_export_safetensors(ckpt, st_dir, st_dtype, max_mb); /* names as trained */
    fp8run_model *m = NULL;
    rc = cli_load_model_or_ckpt(ckpt, model, &m);
    /* a compiled graph writes the original model it holds, with the checkpoint's weights */
    if (rc == 0 && fp8run_model_export(m, out) != FP8RUN_OK) rc = cli_fail_status();
    if (rc == 0) printf("exported %s (weights from %s)\n", out, ckpt);
    fp8run_model_destroy(m);
    return rc;
}
