/* Memory prediction of a training configuration before anything is allocated (see
 * train_memory.h): a plan-only trainer of it, measured and freed. Apart from train_memory.c,
 * whose accounting the trainer's build calls for its own checks, so that the accounting stays
 * below the trainer and the prediction above it. */
#include <stdio.h>
#include <string.h>

#include "runtime/train/train_internal.h"
#include "runtime/train/train_memory.h"

fr_status fr_train_predict_memory(const fr_graph *model, const fr_train_options *opt, int gpu, fr_train_memory *out)
{
    memset(out, 0, sizeof *out);
    fr_train_options o = *opt;
    o.plan_only = 1;
    if (o.chunked_lm_head < 0) o.chunked_lm_head = gpu; /* auto, as the trainer on that device decides */
    o.device = "cpu"; /* the graphs do not depend on the device; no device is touched */
    o.world_size = 0;  /* nor on the rank count: the shares are applied to the plan */
    fr_trainer *t;
    FR_TRY(fr_trainer_new(model, &o, &t));
    t->opt.world_size = opt->world_size;
    fr_status st = tr_memory_of(t, gpu, out);
    size_t off = 0;
    for (int i = 0; i < t->passes.n; i++) {
        const fr_pass_result *r = &t->passes.pass[i];
        const fr_pass *p = fr_pipeline_find(r->name);
        if (!p || p->stage != FR_STAGE_DIFFERENTIATED || off >= sizeof out->backward_passes) continue;
        off += (size_t)snprintf(out->backward_passes + off, sizeof out->backward_passes - off, "%s%s: %s",
                                off ? "\n" : "", r->name, r->detail);
    }
    fr_trainer_free(t);
    return st;
}
