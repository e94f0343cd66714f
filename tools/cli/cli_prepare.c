/* fp8run prepare: text files into token files. "--tokenizer bytes" is done here (each UTF-8
 * byte a token); a Hugging Face tokenizer.json runs the Python package's prepare.py (python3
 * with `tokenizers`), which does the same for any tokenizer: one implementation of the
 * formats per language, and the tests check that they agree byte for byte. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "prepare_jsonl.h"

#define BYTES_EOS 0 /* NUL: never in text, and the vocabulary stays 256 (prepare.py's BYTES_EOS) */
#define LLMC_MAGIC_U16 20240520
#define LLMC_MAGIC_U32 20240801

void cli_prepare_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run prepare --tokenizer tokenizer.json|bytes TEXT [MORE ...] -o TOKENS.bin [options]\n"
            "       fp8run prepare --sft --tokenizer tokenizer.json|bytes DATA.jsonl [MORE ...] -o SFT.bin [options]\n"
            "\n"
            "Tokenizes text files (each file one document; a .jsonl file one document per line,\n"
            "its \"text\" field), joins the documents with the EOS id after each, and writes the\n"
            "tokens, the last --val-fraction of them to a validation file. uint16 tokens when the\n"
            "vocabulary fits (<= 65536), else uint32. A tokenizer.json is read with Hugging Face\n"
            "`tokenizers` in python3 (pip install tokenizers; the fp8run Python package must be\n"
            "importable or in this build's source tree); 'bytes' (each UTF-8 byte a token, EOS 0,\n"
            "vocabulary 256) needs no Python.\n"
            "\n"
            "--sft: supervised fine-tuning examples, one JSON object a line: {\"prompt\": .., \"completion\": ..}\n"
            "(targets: the completion and EOS) or {\"messages\": [{\"role\": .., \"content\": ..}, ..]}\n"
            "rendered with the model's chat template (chat_template.jinja or tokenizer_config.json\n"
            "beside tokenizer.json) as transformers' apply_chat_template does (targets: the\n"
            "assistant turns; python3 with jinja2). Bytes: each message is \"ROLE: CONTENT\\n\" (no\n"
            "Python). Writes an SFT token file (ids + target flags) that train and eval take as\n"
            "--data; prints examples, target and prompt tokens, and with --seq how full packed and\n"
            "unpacked windows are.\n"
            "\n"
            "options:\n"
            "  -o FILE                 the training tokens (required)\n"
            "  --val-fraction F        the last fraction F of the tokens to validation (default 0)\n"
            "  --val-out FILE          the validation tokens (default: FILE_val.bin beside -o)\n"
            "  --format fp8run|nanogpt|llmc  raw uint16/uint32 (default); nanoGPT's raw uint16;\n"
            "                          llm.c's (a 1 KiB header, magic 20240520, or 20240801 for uint32)\n"
            "  --eos ID                the end-of-document id (default: the tokenizer's end-of-text\n"
            "                          token; 0 for bytes)\n"
            "  --sft                   JSONL examples into an SFT token file (above)\n"
            "  --seq T                 with --sft: examples longer than T+1 tokens (a window of T\n"
            "                          inputs) are cut or dropped (--long); the summary's windows\n"
            "  --long truncate|drop    (default truncate; an example left without targets is dropped)\n"
            "  --train-on-prompt       every token a target (default: completions / assistant turns)\n"
            "  --skip-bad-lines        skip (and count) lines that are not examples (default: an\n"
            "                          error naming FILE:LINE)\n"
            "  --chat-template FILE    a Jinja chat template instead of the model's\n"
            "  -h, --help              show this help\n"
            "\n"
            "Environment: FP8RUN_PYTHON the Python interpreter (default python3).\n");
}

typedef struct toks {
    uint16_t *v;
    size_t n, cap;
    int eos;
    int docs;
} toks;

static int push(toks *t, uint16_t x)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1 << 16;
        uint16_t *v = realloc(t->v, cap * sizeof *v);
        if (!v) return -1;
        t->v = v, t->cap = cap;
    }
    t->v[t->n++] = x;
    return 0;
}

/* One plain-text document is read whole (prepare.py's MAX_TEXT_BYTES). */
#define MAX_TEXT_BYTES ((uint64_t)4 << 30)

static int push_doc(void *user, const char *text, size_t n)
{
    toks *t = user;
    for (size_t i = 0; i < n; i++)
        if (push(t, (unsigned char)text[i])) return -1;
    t->docs++;
    return push(t, (uint16_t)t->eos);
}

/* Append a file's bytes as one document, or a .jsonl file's records (prepare_jsonl.c), each
 * followed by the EOS id. Read under the library's read rule: a FIFO, a device or a folder is
 * refused before anything blocks. */
static int read_doc(toks *t, const char *path)
{
    size_t len = strlen(path);
    int jsonl = len > 6 && strcmp(path + len - 6, ".jsonl") == 0;
    char *data, err[600];
    if (fp8run_file_read(path, jsonl ? ".jsonl file" : "text file", MAX_TEXT_BYTES, &data, &len) != FP8RUN_OK)
        return cli_fail_status();
    int rc = 0;
    if (jsonl) {
        if (prepare_jsonl_docs(data, len, path, push_doc, t, err, sizeof err)) rc = cli_fail("%s", err);
    } else if (push_doc(t, data, len)) {
        rc = cli_fail("out of memory");
    }
    fp8run_file_free(data);
    return rc;
}

/* The tokens written and fsync'ed beside path (*w), not yet in place. */
static int write_tokens(const char *path, const uint16_t *v, size_t n, const char *format, fp8run_file_writer **w)
{
    if (fp8run_file_writer_open(path, w) != FP8RUN_OK) return cli_fail_status();
    fp8run_status ps = FP8RUN_OK;
    if (strcmp(format, "llmc") == 0) {
        int32_t header[256] = {LLMC_MAGIC_U16, 1, (int32_t)n};
        ps = fp8run_file_writer_write(*w, header, sizeof header); /* little-endian hosts only, like the loader */
    }
    if (ps == FP8RUN_OK) ps = fp8run_file_writer_write(*w, v, n * sizeof *v);
    if (ps == FP8RUN_OK) ps = fp8run_file_writer_finish(*w);
    return ps == FP8RUN_OK ? 0 : cli_fail_status();
}

/* tokens.bin -> tokens_val.bin (prepare.py's val_path), malloc'ed */
static char *val_path(const char *out)
{
    const char *slash = strrchr(out, '/'), *dot = strrchr(out, '.');
    size_t stem = dot && (!slash || dot > slash + 1) ? (size_t)(dot - out) : strlen(out);
    char *p = malloc(strlen(out) + 9);
    if (p) sprintf(p, "%.*s_val%s", (int)stem, out, stem < strlen(out) ? out + stem : ".bin");
    return p;
}

/* The write rule's refusals before any work: an output that is an input (the text files, the
 * tokenizer.json), or both outputs one file. */
static int check_files(char **files, int n_files, const char *tokenizer, const char *out, const char *val_out)
{
    fp8run_files *f;
    if (fp8run_files_create(&f) != FP8RUN_OK) return cli_fail_status();
    fp8run_status ps = FP8RUN_OK;
    for (int i = 0; i < n_files && ps == FP8RUN_OK; i++) ps = fp8run_files_input(f, files[i], "input file");
    if (ps == FP8RUN_OK && strcmp(tokenizer, "bytes") != 0) ps = fp8run_files_input(f, tokenizer, "tokenizer file");
    if (ps == FP8RUN_OK) ps = fp8run_files_output(f, out, "training token file");
    if (ps == FP8RUN_OK && val_out) ps = fp8run_files_output(f, val_out, "validation token file");
    fp8run_files_destroy(f);
    return ps == FP8RUN_OK ? 0 : cli_fail_status();
}

static int prepare_bytes(char **files, int n_files, const char *out, const char *val_out, double val_fraction,
                         const char *format, int64_t eos)
{
    if (eos < 0) eos = BYTES_EOS;
    if (eos > 65535) return cli_fail("--eos %lld: bytes here are uint16 tokens", (long long)eos);
    toks t = {.eos = (int)eos};
    int rc = 0;
    for (int i = 0; i < n_files && rc == 0; i++) rc = read_doc(&t, files[i]);
    size_t n_val = (size_t)((double)t.n * val_fraction + 0.5);
    if (rc == 0 && val_fraction > 0 && (n_val == 0 || n_val == t.n))
        rc = cli_fail("%zu tokens are too few to split %g of them off for validation", t.n, val_fraction);
    char *vpath = NULL;
    if (rc == 0 && n_val && !val_out) {
        if (!(vpath = val_path(out))) return cli_fail("out of memory");
        val_out = vpath;
    }
    /* both files written in full before either replaces its previous version */
    fp8run_file_writer *w[2] = {NULL, NULL};
    if (rc == 0) rc = write_tokens(out, t.v, t.n - n_val, format, &w[0]);
    if (rc == 0 && n_val) rc = write_tokens(val_out, t.v + t.n - n_val, n_val, format, &w[1]);
    for (int k = 0; k < 2; k++) {
        if (rc == 0 && w[k] && fp8run_file_writer_commit(w[k]) != FP8RUN_OK) rc = cli_fail_status();
        else if (rc != 0) fp8run_file_writer_abort(w[k]);
        w[k] = NULL;
    }
    if (rc == 0) {
        long long vocab = eos >= 256 ? eos + 1 : 256;
        printf("%d documents, %zu tokens (vocab %lld, eos %lld, uint16)\n", t.docs, t.n, vocab, (long long)eos);
        printf("wrote %s (%zu tokens)\n", out, t.n - n_val);
        if (n_val) printf("wrote %s (%zu tokens)\n", val_out, n_val);
    }
    free(vpath);
    free(t.v);
    return rc;
}

/* --sft with bytes: the library's writer (python/fp8run/sft.py writes the same bytes); the
 * summary as prepare.py's summary_sft prints it. */
static int prepare_bytes_sft(char **files, int n_files, const char *out, const char *val_out, double val_fraction,
                             int64_t seq, int drop, int on_prompt, int skip)
{
    char *vpath = NULL;
    if (val_fraction > 0 && !val_out) {
        if (!(vpath = val_path(out))) return cli_fail("out of memory");
        val_out = vpath;
    }
    fp8run_sft_prepare_config c;
    cli_must(fp8run_sft_prepare_config_init(&c, sizeof c));
    c.files = (const char *const *)files;
    c.n_files = n_files;
    c.out = out;
    c.val_out = val_out;
    c.val_fraction = val_fraction;
    c.max_tokens = seq > 0 ? seq + 1 : 0;
    c.drop_long = drop;
    c.train_on_prompt = on_prompt;
    c.skip_bad_lines = skip;
    fp8run_sft_summary s = {.struct_size = sizeof s};
    int rc = fp8run_sft_prepare_bytes(&c, &s) == FP8RUN_OK ? 0 : cli_fail_status();
    if (rc == 0) {
        printf("%lld examples: %lld tokens, %lld targets, %lld prompt (vocab 256, eos 0, uint16)\n",
               (long long)s.examples, (long long)s.tokens, (long long)s.target_tokens,
               (long long)(s.tokens - s.target_tokens));
        printf("skipped: %lld bad lines, %lld without targets; longer than --seq: %lld truncated, %lld dropped\n",
               (long long)s.bad_lines, (long long)s.no_target, (long long)s.truncated, (long long)s.dropped);
        if (seq > 0)
            printf("--seq %lld: packed %lld windows (%.1f%% examples' tokens), unpacked %lld windows (%.1f%%)\n",
                   (long long)seq, (long long)s.windows_packed,
                   100.0 * (double)s.tokens / ((double)s.windows_packed * (double)(seq + 1)), (long long)s.examples,
                   100.0 * (double)s.tokens / ((double)s.examples * (double)(seq + 1)));
        printf("wrote %s (%lld examples)\n", out, (long long)s.train_examples);
        if (s.val_examples) printf("wrote %s (%lld examples)\n", val_out, (long long)s.val_examples);
    }
    free(vpath);
    return rc;
}

/* A tokenizer.json: prepare.py does it all (python3 with `tokenizers`; cli_python.c). */
static int prepare_python(int argc, char **argv)
{
    return cli_python("prepare.py", argc - 1, argv + 1, NULL, NULL);
}

int cli_prepare(int argc, char **argv)
{
    const char *tokenizer = NULL, *out = NULL, *val_out = NULL, *format = "fp8run", *v = NULL;
    double val_fraction = 0;
    int64_t eos = -1, seq = 0;
    int sft = 0, drop = 0, on_prompt = 0, skip = 0;
    const char *chat_template = NULL, *long_mode = "truncate";
    char **files = calloc((size_t)argc, sizeof *files);
    int n_files = 0, rc = 0;
    if (!files) return cli_fail("out of memory");
    for (int i = 1; i < argc && rc == 0; i++) {
        int r;
        char *end;
        if (cli_is_help(argv[i])) {
            cli_prepare_help(stdout);
            free(files);
            return 0;
        }
        if ((r = cli_option(argc, argv, &i, "prepare", "--tokenizer", &tokenizer)) ||
            (r = cli_option(argc, argv, &i, "prepare", "-o", &out)) ||
            (r = cli_option(argc, argv, &i, "prepare", "--val-out", &val_out)) ||
            (r = cli_option(argc, argv, &i, "prepare", "--format", &format))) {
            if (r < 0) rc = CLI_EXIT_USAGE;
        } else if ((r = cli_option(argc, argv, &i, "prepare", "--val-fraction", &v))) {
            if (r < 0) rc = CLI_EXIT_USAGE;
            else if ((val_fraction = strtod(v, &end)), *end || !(val_fraction >= 0 && val_fraction < 1))
                rc = cli_usage("prepare", "--val-fraction %s: a number in [0, 1)", v);
        } else if ((r = cli_option(argc, argv, &i, "prepare", "--eos", &v))) {
            if (r < 0) rc = CLI_EXIT_USAGE;
            else if ((eos = strtoll(v, &end, 10)), *end || eos < 0 || eos > 0xffffffffLL)
                rc = cli_usage("prepare", "--eos %s: a token id", v);
        } else if (strcmp(argv[i], "--sft") == 0) {
            sft = 1;
        } else if (strcmp(argv[i], "--train-on-prompt") == 0) {
            on_prompt = 1;
        } else if (strcmp(argv[i], "--skip-bad-lines") == 0) {
            skip = 1;
        } else if ((r = cli_option(argc, argv, &i, "prepare", "--chat-template", &chat_template)) ||
                   (r = cli_option(argc, argv, &i, "prepare", "--long", &long_mode))) {
            if (r < 0) rc = CLI_EXIT_USAGE;
        } else if ((r = cli_option(argc, argv, &i, "prepare", "--seq", &v))) {
            if (r < 0) rc = CLI_EXIT_USAGE;
            else if ((seq = strtoll(v, &end, 10)), *end || seq < 1)
                rc = cli_usage("prepare", "--seq %s: a positive number of tokens", v);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            rc = cli_usage("prepare", "unknown option '%s'", argv[i]);
        } else {
            files[n_files++] = argv[i];
        }
    }
    if (rc == 0 && !tokenizer) rc = cli_usage("prepare", "--tokenizer tokenizer.json|bytes is required");
    if (rc == 0 && !out) rc = cli_usage("prepare", "-o TOKENS.bin is required");
    if (rc == 0 && n_files == 0) rc = cli_usage("prepare", "give at least one text file");
    if (rc == 0 && strcmp(format, "fp8run") && strcmp(format, "nanogpt") && strcmp(format, "llmc"))
        rc = cli_usage("prepare", "--format %s: use fp8run, nanogpt or llmc", format);
    if (rc == 0 && strcmp(long_mode, "truncate") && strcmp(long_mode, "drop"))
        rc = cli_usage("prepare", "--long %s: use truncate or drop", long_mode);
    drop = strcmp(long_mode, "drop") == 0;
    if (rc == 0 && !sft && (seq || on_prompt || skip || chat_template || drop))
        rc = cli_usage("prepare", "--seq, --long, --train-on-prompt, --skip-bad-lines and --chat-template go with --sft");
    if (rc == 0 && sft && strcmp(format, "fp8run"))
        rc = cli_usage("prepare", "--sft writes an SFT token file; --format does not apply");
    const int bytes = rc == 0 && strcmp(tokenizer, "bytes") == 0;
    if (bytes && sft && chat_template)
        rc = cli_usage("prepare", "--chat-template needs a tokenizer.json (bytes render messages as \"ROLE: CONTENT\")");
    if (bytes && sft && eos >= 0 && eos != BYTES_EOS)
        rc = cli_usage("prepare", "bytes SFT examples end with EOS 0; --eos does not apply");
    char *derived = rc == 0 && val_fraction > 0 && !val_out ? val_path(out) : NULL;
    if (rc == 0) rc = check_files(files, n_files, tokenizer, out, val_fraction > 0 ? (val_out ? val_out : derived) : NULL);
    free(derived);
    if (rc == 0)
        rc = bytes && sft ? prepare_bytes_sft(files, n_files, out, val_out, val_fraction, seq, drop, on_prompt, skip)
             : bytes      ? prepare_bytes(files, n_files, out, val_out, val_fraction, format, eos)
                          : prepare_python(argc, argv);
    free(files);
    return rc;
}
