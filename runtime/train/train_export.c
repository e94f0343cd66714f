/* Export of the trained model: the pristine copy of the imported graph with the trained values
 * written into its initializers (original names and layouts; fused parameters are split back),
 * saved as ONNX. A LoRA run's adapters are merged into their base weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "runtime/train/train_internal.h"

fr_status fr_trainer_export(fr_trainer *t, const char *path)
{
    FR_TRY(tr_sync_host(t));
    if (t->opt.rank > 0) return FR_OK; /* data parallel: rank 0 exports */
    fr_graph *pg = t->pristine;
    for (int i = 0; i < t->n_orig; i++) {
        const tr_orig *o = &t->orig[i];
        if (tr_lora_is_adapter(t, o->name)) continue; /* merged below */
        int vid = fr_graph_find_value(pg, o->name);
        fr_tensor *c = vid >= 0 ? pg->values[vid].constant : NULL;
        if (!c || c->dtype != FR_F32 || fr_tensor_numel(c) != o->numel)
            return fr_error(FR_ERR_INTERNAL, "export: trained parameter '%s' has no float32 initializer of %lld "
                            "elements in the original model",
                            o->name, (long long)o->numel);
        FR_TRY(tr_orig_values(t, o, c->data));
    }
    fr_retie_sync(t->g, t->ties, t->n_ties, pg);
    fr_tensor **base;
    fr_status st = tr_lora_merge(t, pg, &base);
    if (st == FR_OK) st = fr_train_save_model(pg, path);
    tr_lora_unmerge(t, pg, base);
    return st;
}
