/* The table of environment variables and its reader (env.h). */
#include "graph/env.h"

#include <stdlib.h>
#include <string.h>

static const fr_env_knob k_env[FR_ENV_COUNT] = {
#define FR_ENV(name, type, dflt, reader, help) {"FP8RUN_" #name, #type, dflt, #reader, help},
#include "graph/env_knobs.def"
#undef FR_ENV
};

const char *fr_env_get(fr_env id) { return (unsigned)id < FR_ENV_COUNT ? getenv(k_env[id].name) : NULL; }

int fr_env_is(fr_env id, const char *text)
{
    const char *v = fr_env_get(id);
    return v && text && strcmp(v, text) == 0;
}

const char *fr_env_name(fr_env id) { return (unsigned)id < FR_ENV_COUNT ? k_env[id].name : "(unknown variable)"; }

const fr_env_knob *fr_env_knob_at(int i) { return i >= 0 && i < FR_ENV_COUNT ? &k_env[i] : NULL; }

int fr_env_find(const char *name)
{
    for (int i = 0; name && i < FR_ENV_COUNT; i++)
        if (strcmp(name, k_env[i].name) == 0) return i;
    return -1;
}
