/* A compiled graph's recorded options (fp8run.option.*) checked as user input when the API
 * loads a model: each value goes through the option table's own parser (fp8run_train_config_set:
 * runtime/train/train_config.def), with the ranges and choices the command line has, and a
 * string option may not be empty, as no flag may. (The .fbs reader in runtime/io/ has its own
 * bounds, the same or wider; the table lives above it, here.) */
#include <stdio.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "runtime/io/fbs.h"
#include "runtime/io/fbs_meta.h"

fr_status fr_api_check_recorded_options(const fr_graph *g, const char *what)
{
    static const char *const recorded[][2] = {
        {"precision", "precision"},     {"recipe", "recipe"},          {"fp8_format", "fp8_format"},
        {"bf16_boundary", "bf16_boundary"}, {"fp8_exclude", "fp8_exclude"}, {"fuse", "fuse"},
        {"pad_multiple", "pad_multiple"}, {"margin", "fp8_margin"},    {"amax_history", "amax_history_len"},
        {"amax_algo", "amax_algo"},     {"interval", "fp8_interval"},  {"logits_output", "logits_output"},
        {"loss_output", "loss_output"}, {"train", "train_regex"},      {"freeze", "freeze_regex"},
    };
    if (!fr_fbs_is_compiled(g)) return FR_OK;
    fr_fbs_meta m;
    FR_TRY(fr_fbs_meta_open(g, fr_fbs_file_name(g, what), &m));
    fp8run_train_config c;
    fr_api_config_defaults(&c);
    fr_status st = FR_OK;
    for (size_t i = 0; st == FR_OK && i < sizeof recorded / sizeof *recorded; i++) {
        const char *v;
        char key[64];
        snprintf(key, sizeof key, "fp8run.option.%s", recorded[i][0]);
        st = fr_fbs_get_str(&m, 0, &v, "%s", key);
        if (st != FR_OK || !v) continue; /* the reader asks for the required ones */
        if (!v[0]) {
            st = fr_fbs_bad(&m, key, "an empty value (the option needs one)");
        } else if (fp8run_train_config_set(&c, recorded[i][1], v) != FP8RUN_OK) {
            const char *why = fp8run_last_error(), *colon = strstr(why, ": ");
            st = fr_fbs_bad(&m, key, "%s", colon ? colon + 2 : why);
        }
    }
    fr_fbs_meta_close(&m);
    return st;
}
