/* Running a script of the fp8run Python package (prepare.py, tokens.py) with python3, for the
 * commands that need Hugging Face `tokenizers` or jinja2 (see cli.h: cli_python). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#ifndef FP8RUN_SOURCE_PYTHON
#define FP8RUN_SOURCE_PYTHON ""
#endif
/* Finds the fp8run package without importing it (its __init__ loads libfp8run, which this
 * needs not) and runs one of its files, named by FP8RUN_PY_SCRIPT, as __main__ with our
 * arguments. */
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
    "runpy.run_path(os.path.join(os.path.dirname(s.origin), os.environ['FP8RUN_PY_SCRIPT']), run_name='__main__')\n";

/* Write all of text to fd (the child's stdin), then close it. */
static void feed(int fd, const char *text)
{
    size_t n = text ? strlen(text) : 0, done = 0;
    while (done < n) {
        ssize_t k = write(fd, text + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        done += (size_t)k;
    }
    close(fd);
}

/* Everything the child writes to fd, NUL-terminated (malloc'ed; NULL when out of memory). */
static char *drain(int fd)
{
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    for (;;) {
        if (!b) break;
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        ssize_t k = read(fd, b + n, cap - n - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    if (b) b[n] = 0;
    close(fd);
    return b;
}

int cli_python(const char *script, int argc, char **argv, const char *input, char **output)
{
    const char *py = fp8run_env_get("FP8RUN_PYTHON"); /* the environment table (docs/environment.md) */
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
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if ((input && pipe(in) < 0) || (output && pipe(out) < 0)) return cli_fail("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return cli_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        char **args = calloc((size_t)argc + 4, sizeof *args);
        if (!args) _exit(CLI_EXIT_FAIL);
        args[0] = (char *)py, args[1] = "-c", args[2] = (char *)PY_RUNNER;
        for (int i = 0; i < argc; i++) args[i + 3] = argv[i];
        if (input) {
            dup2(in[0], STDIN_FILENO);
            close(in[0]);
            close(in[1]);
        }
        if (output) {
            dup2(out[1], STDOUT_FILENO);
            close(out[0]);
            close(out[1]);
        }
        setenv("FP8RUN_PY_FALLBACK", fallback, 1);
        setenv("FP8RUN_PY_SCRIPT", script, 1);
        execvp(py, args);
        fprintf(stderr, "fp8run: error: cannot run %s (%s): a tokenizer.json needs python3 with the 'tokenizers' "
                        "package; --tokenizer bytes needs no Python\n", py, strerror(errno));
        _exit(CLI_EXIT_FAIL);
    }
    if (input) {
        close(in[0]);
        feed(in[1], input);
    }
    if (output) {
        close(out[1]);
        *output = drain(out[0]);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) return cli_fail("waitpid: %s", strerror(errno));
    if (!WIFEXITED(st)) return cli_fail("%s was killed", py);
    if (output && !*output && WEXITSTATUS(st) == 0) return cli_fail("out of memory reading %s's output", py);
    return WEXITSTATUS(st) == 0 ? 0 : WEXITSTATUS(st) == 2 ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
}
