/* Public API: the table of environment variables (graph/env_knobs.def, graph/env.h), for the
 * CLI's `info --env` and for hosts reading fp8run's variables. */
#include <string.h>

#include "graph/env.h"
#include "runtime/api/api_internal.h"

FP8RUN_API int fp8run_env_count(void) { return FR_ENV_COUNT; }

FP8RUN_API fp8run_status fp8run_env_knob(int i, fp8run_env_info *info)
{
    size_t use = 0;
    fp8run_status ps = fr_api_check_out(NULL, __func__, "info", info, sizeof *info, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    const fr_env_knob *k = fr_env_knob_at(i);
    if (!k)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: variable %d is out of range (%d variables)", __func__, i,
                            FR_ENV_COUNT);
    fp8run_env_info v = {.struct_size = info->struct_size,
                         .name = k->name,
                         .type = k->type,
                         .dflt = k->dflt,
                         .reader = k->reader,
                         .help = k->help,
                         .value = fr_env_get((fr_env)i)};
    memcpy(info, &v, use);
    return FP8RUN_OK;
}

FP8RUN_API const char *fp8run_env_get(const char *name)
{
    int i = fr_env_find(name);
    return i < 0 ? NULL : fr_env_get((fr_env)i);
}
