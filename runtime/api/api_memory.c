/* Public API: memory prediction of a training configuration (runtime/train/train_memory.h). */
#include <stddef.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/train/train_memory.h"

#define REPORT_V1_SIZE offsetof(fp8run_memory_report, gathered_weights)

FP8RUN_API fp8run_status fp8run_model_predict_memory(const fp8run_model *m, const fp8run_train_config *cfg,
                                                     const char *backend, fp8run_memory_report *report)
{
    const char *fn = __func__;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    api_err *slot = (api_err *)&m->err;
    size_t use;
    fp8run_status ps = fr_api_check_out(slot, fn, "report", report, REPORT_V1_SIZE, sizeof *report, &use);
    if (ps != FP8RUN_OK) return ps;
    int gpu;
    if (!backend || strcmp(backend, "auto") == 0)
        gpu = fr_cuda_compiled();
    else if (strcmp(backend, "cuda") == 0 || strcmp(backend, "cpu") == 0)
        gpu = strcmp(backend, "cuda") == 0;
    else
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: backend '%s': use cpu, cuda or auto", fn, backend);
    api_options ao;
    ps = fr_api_options(slot, fn, cfg, &ao);
    if (ps != FP8RUN_OK) return ps;
    fr_train_memory mm;
    fr_status st = fr_train_predict_memory(m->g, &ao.o, gpu, &mm);
    fr_api_options_free(&ao);
    if (st != FR_OK) return fr_api_fail(slot, fn, st);
    fp8run_memory_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = report->struct_size;
    r.gpu = mm.gpu;
    r.params = mm.params;
    r.grads = mm.grads;
    r.optimizer_state = mm.optimizer_state;
    r.fp8_weights = mm.fp8_weights;
    r.activations = mm.activations;
    r.eval_activations = mm.eval_activations;
    r.inputs = mm.inputs;
    r.workspace = mm.workspace;
    r.total = mm.total;
    r.gathered_weights = mm.gathered;
    r.lm_head_saved = mm.lm_head_saved;
    r.lm_heads_fused = (uint64_t)mm.lm_heads_fused;
    memcpy(r.activations_peak, mm.peak, sizeof r.activations_peak);
    memcpy(r.backward_passes, mm.backward_passes, sizeof r.backward_passes);
    memcpy(report, &r, use);
    return FP8RUN_OK;
}
