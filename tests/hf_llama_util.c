/* The transformers Llama fixture through the public API (see hf_llama_util.h). */
#include "hf_llama_util.h"

#include <math.h>
#include <stdio.h>

#include "cli_runner.h"

int64_t hf_win[HF_B * (HF_T + 1)];

void hf_ok(fp8run_status s, const char *what, int line)
{
    if (s != FP8RUN_OK) fprintf(stderr, "\n  line %d: %s -> %d: %s\n", line, what, (int)s, fp8run_last_error());
    CU_ASSERT_EQUAL_FATAL(s, FP8RUN_OK);
}

fp8run_model *hf_load_model(void)
{
    char p[512];
    fp8run_model *m = NULL;
    OK(fp8run_model_load(fr_fixture(p, sizeof p, HF_MODEL), &m));
    return m;
}

double hf_eval(fp8run_session *s)
{
    double loss = NAN;
    OK(fp8run_session_eval(s, hf_win, FP8RUN_DTYPE_INT64, HF_B * (HF_T + 1), &loss));
    return loss;
}

int hf_suite_init(void)
{
    for (int i = 0; i < HF_B * (HF_T + 1); i++) hf_win[i] = (i * 37 + 11) % HF_V;
    return cli_suite_init();
}
