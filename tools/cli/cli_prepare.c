/* fp8run prepare: text files into token files. "--tokenizer bytes" is done here (each UTF-8
 * byte a token); a Hugging Face tokenizer.json runs the Python package's prepare.py (python3
 * with `tokenizers`), which does the same for any tokenizer: one implementation of the
 * formats per language, and the tests check that they agree byte for byte. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define BYTES_EOS 0 /* NUL: never in text, and the vocabulary stays 256 (prepare.py's BYTES_EOS) */
#define LLMC_MAGIC_U16 20240520
#define LLMC_MAGIC_U32 20240801

void cli_prepare_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run prepare --tokenizer tokenizer.json|bytes TEXT [MORE ...] -o TOKENS.bin [options]\n"
            "\n"
            "Tokenizes text files (each file one document; a .jsonl file one document per line,\n"
            "its \"text\" field), joins the documents with the EOS id after each, and writes the\n"
            "tokens, the last --val-fraction of them to a validation file. uint16 tokens when the\n"
            "vocabulary fits (<= 65536), else uint32. A tokenizer.json is read with Hugging Face\n"
            "`tokenizers` in python3 (pip install tokenizers; the fp8run Python package must be\n"
            "importable or in this build's source tree); 'bytes' (each UTF-8 byte a token, EOS 0,\n"
            "vocabulary 256) needs no Python.\n"
            "\n"
            "options:\n"
            "  -o FILE                 the training tokens (required)\n"
            "  --val-fraction F        the last fraction F of the tokens to validation (default 0)\n"
            "  --val-out FILE          the validation tokens (default: FILE_val.bin beside -o)\n"
            "  --format fp8run|nanogpt|llmc  raw uint16/uint32 (default); nanoGPT's raw uint16;\n"
            "                          llm.c's (a 1 KiB header, magic 20240520, or 20240801 for uint32)\n"
            "  --eos ID                the end-of-document id (default: the tokenizer's end-of-text\n"
            "                          token; 0 for bytes)\n"
            "  -h, --help              show this help\n"
            "\n"
            "Environment: FP8RUN_PYTHON the Python interpreter (default python3).\n");
}

typedef struct toks {
    uint16_t *v;
    size_t n, cap;
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

/* Append a file's bytes, as one document (or one per .jsonl line's "text", which is left to
 * the Python side: JSON strings need a JSON reader). */
static int read_doc(toks *t, const char *path, int eos)
{
    size_t len = strlen(path);
    if (len > 6 && strcmp(path + len - 6, ".jsonl") == 0)
        return cli_fail("%s: .jsonl documents need the Python side (a tokenizer.json); with bytes give text files",
                        path);
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail("cannot open %s: %s", path, strerror(errno));
    int c, rc = 0;
    while (rc == 0 && (c = getc(f)) != EOF) rc = push(t, (uint16_t)c);
    if (rc == 0) rc = push(t, (uint16_t)eos);
    fclose(f);
    return rc ? cli_fail("out of memory") : 0;
}

static int write_tokens(const char *path, const uint16_t *v, size_t n, const char *format)
{
    FILE *f = fopen(path, "wb");
    if (!f) return cli_fail("cannot write %s: %s", path, strerror(errno));
    if (strcmp(format, "llmc") == 0) {
        int32_t header[256] = {LLMC_MAGIC_U16, 1, (int32_t)n};
        fwrite(header, sizeof header, 1, f); /* little-endian hosts only, like the loader */
    }
    fwrite(v, sizeof *v, n, f);
    if (ferror(f) | fclose(f)) return cli_fail("writing %s failed", path);
    return 0;
}

static int prepare_bytes(char **files, int n_files, const char *out, const char *val_out, double val_fraction,
                         const char *format, int64_t eos)
{
    if (eos < 0) eos = BYTES_EOS;
    if (eos > 65535) return cli_fail("--eos %lld: bytes here are uint16 tokens", (long long)eos);
    toks t = {0};
    int rc = 0;
    for (int i = 0; i < n_files && rc == 0; i++) rc = read_doc(&t, files[i], (int)eos);
    size_t n_val = (size_t)((double)t.n * val_fraction + 0.5);
    if (rc == 0 && val_fraction > 0 && (n_val == 0 || n_val == t.n))
        rc = cli_fail("%zu tokens are too few to split %g of them off for validation", t.n, val_fraction);
    char *vpath = NULL;
    if (rc == 0 && n_val && !val_out) { /* tokens.bin -> tokens_val.bin (prepare.py's val_path) */
        const char *slash = strrchr(out, '/'), *dot = strrchr(out, '.');
        size_t stem = dot && (!slash || dot > slash + 1) ? (size_t)(dot - out) : strlen(out);
        if (!(vpath = malloc(strlen(out) + 9))) return cli_fail("out of memory");
        sprintf(vpath, "%.*s_val%s", (int)stem, out, stem < strlen(out) ? out + stem : ".bin");
        val_out = vpath;
    }
    if (rc == 0) rc = write_tokens(out, t.v, t.n - n_val, format);
    if (rc == 0 && n_val) rc = write_tokens(val_out, t.v + t.n - n_val, n_val, format);
    if (rc == 0) {
        long long vocab = eos >= 256 ? eos + 1 : 256;
        printf("%d documents, %zu tokens (vocab %lld, eos %lld, uint16)\n", n_files, t.n, vocab, (long long)eos);
        printf("wrote %s (%zu tokens)\n", out, t.n - n_val);
        if (n_val) printf("wrote %s (%zu tokens)\n", val_out, n_val);
    }
    free(vpath);
    free(t.v);
    return rc;
}

#ifndef FP8RUN_SOURCE_PYTHON
#define FP8RUN_SOURCE_PYTHON ""
#endif
/* Finds the fp8run package without importing it (its __init__ loads libfp8run, which this
 * needs not) and runs its prepare.py as __main__ with our arguments. */
static const char PY_RUNNER[] =
    "import importlib.util as u, os, runpy, sys\n"
    "s = u.find_spec('fp8run')\n"
    "if s is None:\n"
    "    for d in os.environ.get('FP8RUN_PY_FALLBACK', '').split(os.pathsep):\n"
    "        if d and os.path.exists(os.path.join(d, 'fp8run', 'prepare.py')):\n"
    "            sys.path.append(d); s = u.find_spec('fp8run'); break\n"
    "if s is None:\n"
    "    sys.exit('fp8run: error: %s cannot find the fp8run Python package (pip install it, or set PYTHONPATH)'"
    " % sys.executable)\n"
    "runpy.run_path(os.path.join(os.path.dirname(s.origin), 'prepare.py'), run_name='__main__')\n";

static int prepare_python(int argc, char **argv)
{
    const char *py = fp8run_env_get("FP8RUN_PYTHON");
    if (!py || !*py) py = "python3";
    /* fallbacks: this build's source tree, and the site folder when the CLI is inside the
     * installed package (site-packages/fp8run/bin/fp8run) */
    char exe[4096], fallback[8300];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    for (int up = 0; up < 3; up++) {
        char *s = strrchr(exe, '/');
        if (s) *s = 0;
    }
    snprintf(fallback, sizeof fallback, "%s:%s", FP8RUN_SOURCE_PYTHON, exe);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return cli_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        char **args = calloc((size_t)argc + 3, sizeof *args);
        if (!args) _exit(CLI_EXIT_FAIL);
        args[0] = (char *)py, args[1] = "-c", args[2] = (char *)PY_RUNNER;
        for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
        setenv("FP8RUN_PY_FALLBACK", fallback, 1);
        execvp(py, args);
        fprintf(stderr, "fp8run: error: cannot run %s (%s): a tokenizer.json needs python3 with the 'tokenizers' "
                        "package; --tokenizer bytes needs no Python\n", py, strerror(errno));
        _exit(CLI_EXIT_FAIL);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) return cli_fail("waitpid: %s", strerror(errno));
    if (!WIFEXITED(st)) return cli_fail("%s was killed", py);
    return WEXITSTATUS(st) == 0 ? 0 : WEXITSTATUS(st) == 2 ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
}

int cli_prepare(int argc, char **argv)
{
    const char *tokenizer = NULL, *out = NULL, *val_out = NULL, *format = "fp8run", *v = NULL;
    double val_fraction = 0;
    int64_t eos = -1;
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
    if (rc == 0)
        rc = strcmp(tokenizer, "bytes") == 0 ? prepare_bytes(files, n_files, out, val_out, val_fraction, format, eos)
                                             : prepare_python(argc, argv);
    free(files);
    return rc;
}
