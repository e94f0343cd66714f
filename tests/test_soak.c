/* Soak: the bundled tiny Llama trained for thousands of steps with a checkpoint every few steps,
 * SIGKILLed at random moments (between steps, inside a step, while a checkpoint is being written)
 * and resumed each time with --resume, until the run completes. Its final weights (the exported
 * model) must equal, byte for byte, those of the same run never interrupted; and nothing but the
 * checkpoints (no temporary file) may be left in the checkpoint folder.
 * Small enough for CI: FR_SOAK_STEPS (default 2000; 300 under the sanitizers) steps of 2 x 16
 * tokens. On the CPU (--device cpu) where the CLI has a GPU too: equal bits across a resume are
 * the CPU's promise; a GPU step sums in an order that may change from run to run. */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cli_runner.h"

static char common[2048];

static int steps_to_run(void)
{
    const char *e = getenv("FR_SOAK_STEPS");
    if (e && atoi(e) > 0) return atoi(e);
    return getenv("FR_TEST_SANITIZE") ? 300 : 2000;
}

/* Start `fp8run train COMMON --ckpt-dir DIR [--resume] --export OUT`, SIGKILL it after `ms`
 * milliseconds (ms < 0: let it finish). Returns 1 when the run finished (exit 0), 0 when killed,
 * -1 on anything else. */
static int run_once(const char *dir, const char *out, int resume, int ms)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && exec '%s' train %s --ckpt-dir %s %s --export %s >>%s.out 2>>%s.err </dev/null",
             cli_tmp, FR_CLI, common, dir, resume ? "--resume" : "", out, dir, dir);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    if (ms >= 0) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 1;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return 0;
    return -1;
}

static void test_kills_and_resumes_equal_uninterrupted(void)
{
    const int steps = steps_to_run();
    char model[512], data[512];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    fr_fixture(data, sizeof data, "train/tokens.bin");
    snprintf(common, sizeof common,
             "'%s' --data '%s' --batch 2 --seq 16 --lr 3e-3 --warmup 20 --min-lr 3e-4 --steps %d "
             "--ckpt-every 7 --ckpt-keep 3 --log-every 1000000 --seed 5 --device cpu",
             model, data, steps);
    /* the run never interrupted */
    CU_ASSERT_EQUAL_FATAL(run_once("ref", "ref.onnx", 0, -1), 1);
    /* the same run, killed at random and resumed until it completes */
    fr_rng r = fr_test_rng("soak kills");
    int kills = 0, done = 0, bad = 0;
    for (int attempt = 0; attempt < 400 && !done && !bad; attempt++) {
        int ms = 30 + (int)(fr_rng_uniform(&r) * 400); /* process start included: some die early */
        int rc = run_once("soak", "soak.onnx", attempt > 0, attempt < 40 ? ms : -1);
        if (rc == 1) done = 1;
        else if (rc == 0) kills++;
        else bad = 1;
    }
    printf("\n    %d steps: %d kills, then completed", steps, kills);
    if (bad || !done) {
        char p[600];
        snprintf(p, sizeof p, "%s/soak.err", cli_tmp);
        char *err = cli_slurp(p, NULL);
        printf("\n%s", err);
        free(err);
    }
    CU_ASSERT_FATAL(done && !bad);
    CU_ASSERT(kills >= 10);
    size_t na = 0, nb = 0;
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/ref.onnx", cli_tmp);
    snprintf(pb, sizeof pb, "%s/soak.onnx", cli_tmp);
    char *a = cli_slurp(pa, &na), *b = cli_slurp(pb, &nb);
    CU_ASSERT(na > 1000 && na == nb && memcmp(a, b, na) == 0); /* the same weights, bit for bit */
    free(a);
    free(b);
    /* only checkpoints are left: every temporary file of a killed save was cleaned up */
    snprintf(pa, sizeof pa, "%s/soak", cli_tmp);
    DIR *d = opendir(pa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int ckpts = 0, other = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        size_t n = strlen(e->d_name);
        if (n > 5 && strcmp(e->d_name + n - 5, ".ckpt") == 0) ckpts++;
        else {
            other++;
            printf("\n    left in the checkpoint folder: %s", e->d_name);
        }
    }
    closedir(d);
    CU_ASSERT(ckpts >= 1 && ckpts <= 3 + 1); /* --ckpt-keep 3, plus the final one */
    CU_ASSERT_EQUAL(other, 0);
}

static CU_TestInfo tests[] = {
    {"random SIGKILLs and --resume: final weights == the uninterrupted run's", test_kills_and_resumes_equal_uninterrupted},
    CU_TEST_INFO_NULL,
};
static CU_SuiteInfo suites[] = {{"soak", cli_suite_init, cli_suite_clean, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
