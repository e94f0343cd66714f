/* The transformers Llama fixture (tests/fixtures/hf/llama_op18_static: batch 2 x seq 11,
 * vocab 211) through the public API, for the tests that train it (test_api_safetensors,
 * test_lora): a fixed batch of windows, loading, evaluation, asserting calls succeed. */
#ifndef FR_HF_LLAMA_UTIL_H
#define FR_HF_LLAMA_UTIL_H

#include <stdint.h>

#include "fp8run.h"
#include "harness.h"

#define HF_MODEL "hf/llama_op18_static/model.onnx"
#define HF_B 2
#define HF_T 11
#define HF_V 211

/* B windows of T + 1 token ids (filled by hf_suite_init) */
extern int64_t hf_win[HF_B * (HF_T + 1)];

/* Asserts s is FP8RUN_OK (fatal), printing the call and the library's message when not. */
void hf_ok(fp8run_status s, const char *what, int line);
#define OK(expr) hf_ok((expr), #expr, __LINE__)

fp8run_model *hf_load_model(void);
/* The loss of hf_win. */
double hf_eval(fp8run_session *s);
/* CUnit suite init: fills hf_win, then cli_suite_init. */
int hf_suite_init(void);

#endif
