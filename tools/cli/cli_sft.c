/* SFT token files in `fp8run train` and `fp8run eval` (see cli_sft.h). */
#include <stdlib.h>
#include <string.h>

#include "cli_sft.h"

int cli_sft_setup(const char *cmd, train_args *a)
{
    a->o.sft = a->data && fp8run_file_is_sft(a->data);
    if (!a->o.sft && cli_config_given(&a->given, "packing"))
        return cli_usage(cmd, "--packing applies to SFT token files (fp8run prepare --sft); '%s' is not one",
                         a->data ? a->data : "--data");
    if (a->o.sft && a->val && !fp8run_file_is_sft(a->val))
        return cli_usage(cmd, "--data is an SFT token file, --val '%s' is not (prepare both with --sft)", a->val);
    return 0;
}

/* the most examples a window of the SFT file at path holds (0 when it cannot be opened: the
   loader opened after the session reports why) */
static int64_t max_examples(const char *path, const fp8run_data_config *d)
{
    fp8run_data_loader *dl = NULL;
    fp8run_sft_info s = {.struct_size = sizeof s};
    if (!path || fp8run_data_open_val(path, d, 0, &dl) != FP8RUN_OK) return 0;
    int64_t m = fp8run_data_sft_info(dl, &s) == FP8RUN_OK ? s.max_examples : 0;
    fp8run_data_close(dl);
    return m;
}

void cli_sft_size(const train_args *a, fp8run_train_config *o)
{
    if (!o->sft || (o->packing && strcmp(o->packing, "off") == 0)) return;
    fp8run_data_config d = train_args_data_config(a, 0);
    d.batch = 1; /* the windows are the same for any batch; a small file still opens */
    const int64_t m = max_examples(a->data, &d), v = max_examples(a->val, &d);
    o->sft_max_examples = (int)(m > v ? m : v);
}

void cli_sft_warn_positions(const train_args *a, fp8run_session *t)
{
    if (a->o.sft && !(a->o.packing && strcmp(a->o.packing, "off") == 0) && !fp8run_session_sft_positions(t))
        fprintf(stderr, "fp8run: warning: --packing on: this model computes absolute positions inside its graph "
                        "(no position_ids input, no rotary embedding), so a packed example sees positions offset "
                        "by the examples before it in its window; --packing off gives each example its own\n");
}

void cli_sft_describe(const char *what, fp8run_data_loader *d, int64_t seq)
{
    fp8run_sft_info s = {.struct_size = sizeof s};
    if (fp8run_data_sft_info(d, &s) != FP8RUN_OK || s.windows == 0) return;
    fprintf(stderr, "%s: %lld examples in %lld windows of %lld tokens (%.1f%% of their tokens are examples'), "
            "%lld target tokens", what, (long long)s.examples, (long long)s.windows, (long long)seq + 1,
            100.0 * (double)s.tokens / ((double)s.windows * (double)(seq + 1)), (long long)s.target_labels);
    if (s.truncated) fprintf(stderr, "; %lld examples longer than --seq + 1 were cut", (long long)s.truncated);
    fputc('\n', stderr);
}

int cli_sft_eval(fp8run_session *t, fp8run_data_loader *d, double *loss, int64_t *targets)
{
    const size_t per = (size_t)(fp8run_session_batch(t) * (fp8run_session_seq_len(t) + 1));
    int64_t *w = malloc(per * sizeof *w);
    int32_t *seg = malloc(per * sizeof *seg);
    uint8_t *tgt = malloc(per);
    int rc = w && seg && tgt ? 0 : cli_fail("out of memory");
    double sum = 0;
    int64_t total = 0, n = fp8run_data_batches_per_epoch(d);
    fp8run_data_reset(d);
    for (int64_t b = 0; b < n && rc == 0; b++) {
        double l;
        int64_t k;
        if (fp8run_data_next_sft(d, w, seg, tgt, per, NULL) != FP8RUN_OK ||
            fp8run_session_eval_sft(t, w, seg, tgt, per, &l, &k) != FP8RUN_OK)
            rc = cli_fail_status();
        sum += l * (double)k; /* the batch's mean over its targets, back to a sum */
        total += k;
    }
    free(w);
    free(seg);
    free(tgt);
    *loss = total ? sum / (double)total : 0;
    *targets = total;
    return rc;
}
